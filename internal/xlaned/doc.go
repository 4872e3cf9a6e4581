// Package xlaned is what xlaned runs, wired: the daemon's core opened
// (daemon.Open), each feature package the core calls made with the core
// and the handles it needs of the others and registered (Features,
// daemon.Register), the daemon started (daemon.Start). cmd/xlaned parses
// its flags and calls Start; the daemon's and the server's tests start
// their daemons with it too, so they run what users run. A new feature
// that the core calls is made in Features (and gets a field of
// daemon.Features); one the core never calls (Hubble, BGP, LB IPAM) is
// made by cmd/xlaned once the daemon has started.
package xlaned
