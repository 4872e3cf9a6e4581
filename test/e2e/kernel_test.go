package e2e

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/features"
)

// bulkSize is the size of a checked TCP transfer: def, or XLANE_E2E_BULK
// bytes (the kernel matrix shrinks it: its guests run in software
// emulation, 6-20x slower).
func bulkSize(def int64) int64 {
	if s := os.Getenv("XLANE_E2E_BULK"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return def
}

// requireMode skips a test of a datapath mode this kernel cannot run, after
// checking that the daemon refuses it with a reason, unless the kernel
// matrix says this kernel must run it (XLANE_REQUIRE_MODES): then it fails.
func requireMode(t *testing.T, n *node, mode string) {
	t.Helper()
	var st api.Status
	n.mustXlane(&st, "status")
	for _, m := range st.Modes {
		if string(m.Mode) != mode || m.Available {
			continue
		}
		if slices.Contains(strings.Split(os.Getenv("XLANE_REQUIRE_MODES"), ","), mode) {
			t.Fatalf("mode %s unavailable on a kernel the matrix says runs it: %s", mode, m.Reason)
		}
		_, stderr, err := n.xlane("network", "create", "refused", "--subnet", "10.89.0.0/24", "--mode", mode)
		if err == nil || !strings.Contains(stderr, mode) {
			t.Fatalf("mode %s unavailable (%s), yet create: err %v stderr %q", mode, m.Reason, err, stderr)
		}
		t.Skipf("mode %s unavailable on this kernel, refused with: %s", mode, strings.TrimSpace(stderr))
	}
}

// Where netkit or tcx is missing, what needs them is refused with the
// reason, or falls back; auto picks what the kernel has. Runs on every leg.
func TestKernelFeatures(t *testing.T) {
	n := newNode(t)
	var st api.Status
	n.mustXlane(&st, "status")
	have := map[string]bool{}
	for _, f := range st.Features {
		have[f.Name] = f.Available
	}
	if len(have) == 0 {
		t.Fatalf("status shows no kernel features: %+v", st)
	}
	for _, f := range features.Required() {
		if !have[f] {
			t.Errorf("feature %s missing on a kernel the matrix says has it", f)
		}
	}
	var auto api.NetworkInfo
	n.mustXlane(&auto, "network", "create", "a", "--subnet", "10.80.0.0/24", "--device", "auto", "--masquerade=false")
	want := "veth"
	if have[features.Netkit] {
		want = "netkit"
	}
	if string(auto.DeviceType) != want {
		t.Errorf("device auto chose %q, want %q (netkit available: %v)", auto.DeviceType, want, have[features.Netkit])
	}
	if !have[features.Netkit] {
		_, stderr, err := n.xlane("network", "create", "k", "--subnet", "10.81.0.0/24", "--device", "netkit")
		if err == nil || !strings.Contains(stderr, "netkit") {
			t.Errorf("--device netkit without netkit: err %v stderr %q, want a refusal naming netkit", err, stderr)
		}
	}
	// tc mode works on every kernel of the matrix: tcx links, or cls_bpf
	// filters where there is no tcx.
	n.mustXlane(nil, "network", "create", "t", "--subnet", "10.82.0.0/24", "--mode", "tc")
	c1, c2 := newNetns(t, "c"), newNetns(t, "c")
	var e1, e2 api.EndpointInfo
	n.mustXlane(&e1, "endpoint", "add", "t", "--netns", c1)
	n.mustXlane(&e2, "endpoint", "add", "t", "--netns", c2)
	hook := "tcx/ingress"
	if !have[features.TCX] {
		hook = "tc/ingress"
	}
	if !contains(e1.Datapath, hook) {
		t.Fatalf("tc endpoint programs %v, want %s", e1.Datapath, hook)
	}
	ping(t, c1, e2.IPs[0])
	transfer(t, c1, c2, e2.IPs[0], bulk/4)
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "inspect", e1.ID)
	if c := reason(ep, "fwd_peer", "from_endpoint"); c.Packets < 100 {
		t.Fatalf("fwd_peer = %d packets: the %s fast path was not used; counters %+v", c.Packets, hook, ep.Reasons)
	}
	for _, m := range st.Modes {
		if !m.Available && m.Reason == "" {
			t.Errorf("mode %s unavailable without a reason", m.Mode)
		}
		if !m.Available && m.Mode != "kernel" {
			_, stderr, err := n.xlane("network", "create", "x"+string(m.Mode), "--subnet", "10.83.0.0/24", "--mode", string(m.Mode))
			if err == nil || !strings.Contains(stderr, string(m.Mode)) {
				t.Errorf("mode %s unavailable, yet create: err %v stderr %q", m.Mode, err, stderr)
			}
		}
	}
	n.mustXlane(nil, "network", "rm", "t", "--force")
	n.mustXlane(nil, "network", "rm", "a")
	if pins := endpointPins(n); len(pins) > 0 {
		t.Errorf("endpoint links or programs left pinned: %v", pins)
	}
}

// endpointPins lists what is pinned for endpoint devices (xlh*) under the
// node's pin directory: links, or programs where legacy tc has no links.
func endpointPins(n *node) []string {
	var out []string
	ents, _ := os.ReadDir(n.pinDir + "/links")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "xlh") {
			out = append(out, e.Name())
		}
	}
	return out
}
