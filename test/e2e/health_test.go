package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// `xlane status`'s health summary: all well after setup (programs
// attached as the mode says, every map pin there, the GC passing), then
// a link pin and a map pin removed behind xlaned's back are reported.
func TestStatusHealth(t *testing.T) {
	n := newNode(t, func(n *node) { n.flags = append(n.flags, "--ct-gc-interval", "1s") })
	requireMode(t, n, "tc")
	n.mustXlane(nil, "network", "create", "blue", "--subnet", "10.74.0.0/24", "--mode", "tc")
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "blue", "--netns", newNetns(t, "c"))
	time.Sleep(1500 * time.Millisecond) // a GC pass

	var st api.Status
	n.mustXlane(&st, "status")
	h := st.Health
	if h == nil || !h.OK || len(h.Problems) != 0 {
		t.Fatalf("health after setup: %+v", h)
	}
	if h.Programs.Expected != 2 || h.Programs.Attached != 2 {
		t.Errorf("programs %d of %d, want 2 of 2 (tcx ingress and egress)", h.Programs.Attached, h.Programs.Expected)
	}
	if h.Pins.Expected < 10 || h.Pins.Present != h.Pins.Expected {
		t.Errorf("pins %d of %d", h.Pins.Present, h.Pins.Expected)
	}
	if h.MapPressure == nil || h.MapPressure.MaxEntries == 0 {
		t.Errorf("no fullest map: %+v", h.MapPressure)
	}
	if g := h.CTGC; g == nil || g.Runs == 0 || g.LastRun == nil || g.IntervalSeconds != 1 || g.LagSeconds > 1 {
		t.Errorf("conntrack gc: %+v", g)
	}
	out, _, err := n.xlane("status")
	if err != nil || !strings.Contains(out, "programs attached:") || !strings.Contains(out, "health:") {
		t.Errorf("xlane status (table): %v\n%s", err, out)
	}
	t.Logf("xlane status:\n%s", out)

	// Behind xlaned's back: the egress link's pin (which detaches it)
	// and a map's pin.
	if err := os.Remove(filepath.Join(n.pinDir, "links", ep.HostIf+"_egress")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.pinDir, "maps", "xlane_publish")); err != nil {
		t.Fatal(err)
	}
	n.mustXlane(&st, "status")
	h = st.Health
	if h.OK || h.Programs.Attached != 1 || len(h.Programs.Missing) != 1 || !strings.Contains(h.Programs.Missing[0], "tcx/egress") {
		t.Errorf("after the egress link's pin went: %+v", h)
	}
	if len(h.Pins.Missing) != 1 || !strings.HasSuffix(h.Pins.Missing[0], "/xlane_publish") {
		t.Errorf("after xlane_publish's pin went: pins %+v", h.Pins)
	}
	if len(h.Problems) != 2 {
		t.Errorf("problems %q, want the program and the pin", h.Problems)
	}
}
