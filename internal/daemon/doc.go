// Package daemon is xlaned's core: it validates requests, records them in
// the store, and makes the kernel match the store. Every change is checked
// in full before anything is touched; a failure while applying undoes what
// was applied and rolls the store transaction back, so nothing is left
// half-created (the apply steps' fault points: core.Faults). Reconcile
// rebuilds the kernel side from the store at start.
//
// The API server (internal/server) and the Docker driver (internal/docker)
// call into this package; neither touches netlink or BPF directly. The
// daemon itself reaches BPF only through datapath.Datapath: the BPF
// datapath, or datapath.Unavailable where it cannot load (only kernel mode
// then), or a fake in tests (seam_test.go).
//
// Feature packages take the core as a core.Core (core.go: coreView, and
// wireFeatures, which makes them) and never import this package: VM
// endpoints (internal/vm), the calibration (internal/calibration),
// observability's monitor, trace, flows and dumps (internal/observe, made
// by startObserve once the datapath is open), the cluster with the
// neighbour mirror (internal/cluster), services (internal/services), the
// firewall's control (internal/firewall/control, started before the API
// serves) and the socket layer's, acceleration and proxy redirects
// (internal/accelproxy). The daemon hands the API each of them (Cluster,
// Services, Firewall, Sockets, Observe, Calibrator, Reporter) and
// implements k8s.Target by delegating to them. The status' health and the
// metrics' snapshot (observe.Reporter, made by wireFeatures) read the
// core's own state through core.Core.Status (coreView.Status: object
// errors, the last error logged, the GC's counters, the start time, run
// statistics) and the firewall's counters and the neighbour mirror
// through observe.ReportDeps.
//
// The core's own files: daemon.go (start, networks, endpoints, status),
// core.go (what features get), attachment.go (CNI attachments: endpoints
// keyed by container and interface, their GC and status), ports.go (an
// endpoint's published ports), reconcile.go, objerrs.go (what the last
// reconcile could not apply), kernel.go (what this kernel can run),
// automode.go and bigtcp.go (what auto and BIG TCP resolve to), node.go
// (node configuration for NAT and socket hooks), nat.go (which modes can
// NAT), policy.go (what a mode can enforce), vlan.go, ctgc.go (conntrack
// garbage collection), proto.go (address and protocol parsing),
// mountns.go, sysctl.go, docker.go (the store for the Docker driver) and
// uninstall.go.
package daemon
