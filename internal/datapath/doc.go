// Package datapath owns the BPF side of the `tc`, `xdp` and `xdp-generic`
// modes for one daemon instance: the loaded programs, the maps pinned under
// the instance's pin directory, and what attaches the programs to each host
// device (pinned tcx, XDP and netkit links; a cls_bpf filter where tcx is
// missing).
//
// Pins make the datapath outlive the daemon: after a crash or an upgrade
// the next daemon loads the same pinned maps, finds the pinned links and
// atomically swaps their programs (bpf_link_update), so traffic never stops.
package datapath
