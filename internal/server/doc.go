// Package server serves the API of package api on a root-only unix socket,
// on top of a *daemon.Daemon. Each route is one line: decode the request,
// call the daemon, encode the answer or the error, with an early return on
// every failure.
package server
