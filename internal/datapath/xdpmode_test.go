package datapath

import "testing"

// TestAutoXDPMode: --uplink-xdp-mode auto attaches generic on a veth (native
// XDP there takes GSO/TSO from the veth's peer: docs/multinode.md measured
// the overlay at a quarter of generic's throughput) and tries native first
// on anything else.
func TestAutoXDPMode(t *testing.T) {
	for typ, want := range map[string]string{"veth": XDPModeGeneric, "device": XDPModeAuto, "bond": XDPModeAuto, "": XDPModeAuto} {
		if got := AutoXDPMode(typ); got != want {
			t.Errorf("AutoXDPMode(%q) = %q, want %q", typ, got, want)
		}
	}
}
