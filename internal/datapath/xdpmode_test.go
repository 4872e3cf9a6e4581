package datapath

import "testing"

// TestAutoXDPMode: --uplink-xdp-mode auto attaches nothing on a veth until
// the firewall's uplink stage needs the program (native XDP there takes
// GSO/TSO from the veth's peer: docs/multinode.md measured the overlay at
// a quarter of generic's throughput; generic copies every GSO packet it
// receives: docs/cilium.md) and tries native first on anything else.
func TestAutoXDPMode(t *testing.T) {
	for typ, want := range map[string]string{"veth": XDPModeNone, "device": XDPModeAuto, "bond": XDPModeAuto, "": XDPModeAuto} {
		if got := AutoXDPMode(typ); got != want {
			t.Errorf("AutoXDPMode(%q) = %q, want %q", typ, got, want)
		}
	}
}
