// Package api is xlane's HTTP/JSON API on the daemon's unix socket: the
// request and response types (version 1, paths under /v1/) and a client.
// The CLI (internal/cli) speaks it; the Docker driver calls the daemon
// in-process instead.
//
// Errors travel as {"error": {"code", "field", "message"}} with an HTTP
// status to match. field is the request's JSON key ("pod_cidrs",
// "services[3].vip", "rules[web].dport"), and the message starts with it;
// values echoed in a message are clipped (at most 2 KiB a message). The
// client turns them back into errors that satisfy
// errors.Is(err, model.ErrNotFound) and friends.
package api
