// Package observe is the observability feature of xlaned: the datapath's
// event monitor (monitor.go: the ring's reader, the per-client filters and
// the conntrack GC's flow_close events), `xlane trace` (trace.go: one
// packet through a private copy of the programs), the conntrack listing
// and flush (flows.go) and the BPF map dumps (bpfdump.go); and the
// Reporter (report.go): `xlane status`'s health summary (health.go, with
// LastError, the log handler that keeps the last warning or error) and
// the snapshot a Prometheus scrape exports (metrics.go; internal/metrics
// turns it into series).
//
// It reaches the rest of the daemon only through core.Core (the store, the
// datapath, the conntrack GC's counts) and Deps, what other features tell
// it to name things (the firewall's rule names, the cluster's nodes and
// overlay port, the calibration's probe lock). internal/xlaned makes it
// with the other features once the datapath is open, the daemon starts its
// monitor (Start) after the firewall, and the API server reaches it with
// Daemon.Observe. The Reporter needs no open datapath: internal/xlaned
// makes it with the other features too, and it reads the core's own state through core.Core.Status (core/status.go) and
// the firewall's counters and the neighbour mirror through ReportDeps.
package observe
