// Package datapath owns the BPF side of the `tc`, `xdp` and `xdp-generic`
// modes for one daemon instance: the loaded programs (internal/bpf), every
// pin under the instance's pin directory (maps/: the maps, the firewall's
// included; links/: the pinned tcx, XDP and netkit links of each host
// device, or a cls_bpf filter's program where tcx is missing; node/: the
// uplink and socket hooks), and what the control plane may ask of them.
//
// Pins make the datapath outlive the daemon: after a crash or an upgrade
// the next daemon loads the same pinned maps, finds the pinned links and
// atomically swaps their programs (bpf_link_update), so traffic never stops.
//
// The daemon sees the datapath through the Datapath interface (seam.go),
// composed of role interfaces (Endpoints, Services, Conntrack, Overlay,
// Accel, Proxy, Observe, ...) that take internal/model types: map keys, values
// and flags are encoded here, and no other product package imports
// internal/bpf (imports_test.go). *BPF (Open) is the real one; Unavailable
// (unavailable.go) stands in where BPF cannot load, failing every change
// with ErrUnavailable; datapathtest has an in-memory fake for the daemon's
// tests, which embeds Unavailable for what it does not model.
//
// One concern per file: datapath.go (endpoint hooks, the metrics maps,
// the uplink's XDP program), endpoints.go (the endpoint map and its
// flags), vocab.go (internal/bpf's names its callers use), legacytc.go (cls_bpf where tcx
// is missing), netlink.go (netlink XDP detach), netkit.go, neigh.go, node.go (node configuration, the
// uplink's tc program, socket hooks), ports.go (published ports),
// flows.go (reading and flushing conntrack), ctgc.go (conntrack garbage
// collection), ctclock.go (the conntrack clock), services.go (service
// VIPs and their Maglev tables), kernel.go (what loaded here),
// inventory.go (map fill and program run statistics, for metrics).
package datapath
