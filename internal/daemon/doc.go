// Package daemon is xlaned's core: it validates requests, records them in
// the store, and makes the kernel match the store. Every change is checked
// in full before anything is touched; a failure while applying undoes what
// was applied and rolls the store transaction back, so nothing is left
// half-created. Reconcile rebuilds the kernel side from the store at start.
//
// The API server (internal/server) and the Docker driver (internal/docker)
// call into this package; neither touches netlink or BPF directly. The
// daemon itself reaches BPF only through datapath.Datapath: the BPF
// datapath, or datapath.Unavailable where it cannot load (only kernel mode
// then), or a fake in tests (seam_test.go).
//
// Files by concern: daemon.go (start, networks, endpoints, status),
// attachment.go (CNI attachments: endpoints keyed by container and
// interface, their GC and status), reconcile.go, kernel.go (what this kernel can run), node.go (node
// configuration for NAT and socket hooks), nat.go (which modes can NAT),
// ports.go (published ports), flows.go (conntrack listing and statistics),
// ctgc.go (conntrack garbage collection), proto.go (address and protocol
// parsing), services.go, neigh.go (the neighbour mirror), firewall.go and
// lasthit.go (the firewall), policy.go, docker.go (the store for the Docker
// driver), sysctl.go, uninstall.go and metrics.go (what a Prometheus
// scrape reads: internal/metrics' Snapshot).
package daemon
