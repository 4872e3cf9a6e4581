// Package observe is the observability feature of xlaned: the datapath's
// event monitor (monitor.go: the ring's reader, the per-client filters and
// the conntrack GC's flow_close events), `xlane trace` (trace.go: one
// packet through a private copy of the programs), the conntrack listing
// and flush (flows.go) and the BPF map dumps (bpfdump.go).
//
// It reaches the rest of the daemon only through core.Core (the store, the
// datapath, the conntrack GC's counts) and Deps, what other features tell
// it to name things (the firewall's rule names, the cluster's nodes and
// overlay port, the calibration's probe lock). internal/daemon makes it
// once the datapath is open (core.go: startObserve) and the API server
// reaches it with Daemon.Observe. The metrics snapshot (metrics.go) and
// /v1/health (health.go) still live in internal/daemon: they read most of
// the core's state.
package observe
