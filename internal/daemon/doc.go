// Package daemon is xlaned's core: it validates requests, records them in
// the store, and makes the kernel match the store. Every change is checked
// in full before anything is touched; a failure while applying undoes what
// was applied and rolls the store transaction back, so nothing is left
// half-created (the apply steps' fault points: core.Faults). Reconcile
// rebuilds the kernel side from the store at start.
//
// # Start
//
// A daemon starts in three steps, which internal/xlaned takes (xlaned.Start:
// cmd/xlaned runs it, and the tests):
//
//  1. Open: the store and the datapath (BPF, or datapath.Unavailable where
//     it cannot load: kernel mode only), the kernel's features probed
//     meanwhile; nothing started.
//  2. Register: the feature packages, each made (xlaned.Features) with the core
//     (Core, a core.Core) and the handles it needs of the others
//     (Features; features.go). Their validators (core.NetworkValidator,
//     core.EndpointValidator) are found here.
//  3. Start: the kernel's features logged, the calibration loaded,
//     Reconcile, the firewall and the monitor started, then with the BPF
//     datapath the uplink, VLANs, the node configuration, services, the
//     cluster, the neighbour mirror, the conntrack GC, run statistics, the
//     socket layer and a calibration at start.
//
// A failure in any step closes what was opened (Close): the store, the
// datapath, the features' work; nothing is half-applied that the next
// start would not redo, and xlaned always starts again.
//
// # Features
//
// Feature packages take the core as a core.Core (core.go: coreView) and
// never import this package: VM endpoints (internal/vm), the calibration
// (internal/calibration), observability's monitor, trace, flows, dumps,
// health and metrics (internal/observe), the cluster with the neighbour
// mirror (internal/cluster), services (internal/services), the firewall's
// control (internal/firewall/control) and the socket layer's, acceleration
// and proxy redirects (internal/accelproxy). The core calls them at fixed
// points (Features says which); the daemon hands the API each of them
// (Cluster, Services, Firewall, Sockets, Observe, Calibrator, Reporter) and
// implements k8s.Target by delegating to them. The status' health and the
// metrics' snapshot (observe.Reporter) read the core's own state through
// core.Core.Status (coreView.Status: object errors, the last error logged,
// the GC's counters, the start time, run statistics).
//
// The API server (internal/server) and the Docker driver (internal/docker)
// call into this package; neither touches netlink or BPF directly. The
// daemon itself reaches BPF only through datapath.Datapath: the BPF
// datapath, or datapath.Unavailable, or a fake in tests (seam_test.go).
//
// # A CNI ADD
//
// server → AddAttachment (attachment.go) → attachmentNetwork (a missing
// network: CreateNetwork → validateNetwork, with each NetworkValidator at
// core.CheckName, CheckDefaults, CheckShape) → addEndpoint (daemon.go) →
// store.Update{validateEndpoint (the core's checks, then each
// EndpointValidator: calibration, VMs) → ipam.Allocate → applyEndpoint →
// programEndpoint} → PublishPorts (ports.go) for the ADD's port mappings;
// any error rolls the endpoint back (unapplyEndpoint, RemoveEndpoint).
//
// # Files
//
// daemon.go (Open, Start, networks, endpoints, status), features.go (the
// features: Register, the API's handles), core.go (what features get),
// attachment.go (CNI attachments: endpoints keyed by container and
// interface, their GC and status), ports.go (an endpoint's published
// ports), reconcile.go, objerrs.go (what the last reconcile could not
// apply), kernel.go (what this kernel can run), automode.go and bigtcp.go
// (what auto and BIG TCP resolve to), node.go (node configuration for NAT
// and socket hooks), nat.go (which modes can NAT), policy.go (what a mode
// can enforce), vlan.go, ctgc.go (conntrack garbage collection), proto.go
// (address and protocol parsing), mountns.go, sysctl.go, statusparts.go
// (features' parts of the status), docker.go (the store for the Docker
// driver) and uninstall.go.
package daemon
