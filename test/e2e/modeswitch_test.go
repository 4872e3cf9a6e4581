package e2e

import (
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// Switching a network's mode under load keeps established TCP connections:
// a paced transfer runs across tc -> xdp -> xdp-generic -> kernel -> tc and
// arrives whole (SHA-256), and each mode's programs really were in place.
func TestModeSwitchUnderLoad(t *testing.T) {
	n := newNode(t)
	n.mustXlane(nil, "network", "create", "sw", "--subnet", "10.84.0.0/24", "--subnet", "fd00:84::/64", "--mode", "tc", "--masquerade=false")
	a, b := newNetns(t, "c"), newNetns(t, "c")
	var ea, eb api.EndpointInfo
	n.mustXlane(&ea, "endpoint", "add", "sw", "--netns", a)
	n.mustXlane(&eb, "endpoint", "add", "sw", "--netns", b)

	wait4 := startTransfer(t, a, b, eb.IPs[0], 300<<20, 50<<20)
	wait6 := startTransfer(t, b, a, ea.IPs[1], 300<<20, 50<<20)
	want := map[string]string{"xdp": "xdp/xdp", "xdp-generic": "xdp/xdpgeneric", "kernel": "", "tc": "tcx/ingress"}
	for _, mode := range []string{"xdp", "xdp-generic", "kernel", "tc"} {
		time.Sleep(time.Second)
		var net api.NetworkInfo
		n.mustXlane(&net, "network", "update", "sw", "--mode", mode)
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", ea.ID)
		if string(ep.Mode) != mode {
			t.Fatalf("after update: endpoint mode %q, want %q", ep.Mode, mode)
		}
		if w := want[mode]; w == "" && len(ep.Datapath) != 0 || w != "" && !contains(ep.Datapath, w) {
			t.Fatalf("mode %s: host veth programs %v, want %q", mode, ep.Datapath, w)
		}
	}
	wait4()
	wait6()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
