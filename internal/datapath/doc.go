// Package datapath owns the BPF side of the `tc` mode for one daemon
// instance: the loaded programs, the maps pinned under the instance's pin
// directory, and one pinned tcx link per host veth and direction.
//
// Pins make the datapath outlive the daemon: after a crash or an upgrade
// the next daemon loads the same pinned maps, finds the pinned links and
// atomically swaps their programs (bpf_link_update), so traffic never stops.
package datapath
