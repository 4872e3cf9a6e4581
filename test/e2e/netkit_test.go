package e2e

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/features"
)

// e2eBulk is the size of a checked TCP transfer: bulk, or XLANE_E2E_BULK
// bytes (the kernel matrix shrinks it: its guests run in software
// emulation).
func e2eBulk() int64 {
	if s := os.Getenv("XLANE_E2E_BULK"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return bulk
}

//	 node netns (xlaned)                             container netns
//	+-------------------------------------------+
//	| lo: 10.78.0.1, fd00:78::1 (gateway)       |     +------------+
//	| xlhAAAA (netkit primary) [peer + primary programs]--| eth0 .2 ::2 | c1
//	| xlhBBBB (netkit primary) ------------------------| eth0 .3 ::3 | c2
//	| xlhCCCC (veth, tcx, network "v") --------------| eth0 10.79.0.2 | c3
//	+-------------------------------------------+     +------------+
//
// Netkit endpoints in L3 and L2 mode: IPv4/IPv6 ping between containers and
// to the gateway, SHA-256 checked TCP container to container (both
// families) and container to the node, the fast path counted, traffic to
// and from a veth endpoint of a tc network on the same node, kill -9 and
// restart of the daemon with traffic checked, removal leaving nothing.
func TestNetkitEndpoints(t *testing.T) {
	features.Require(t, features.Netkit)
	for _, dev := range []string{"netkit", "netkit-l2"} {
		t.Run(dev, func(t *testing.T) { testNetkit(t, dev) })
	}
}

func testNetkit(t *testing.T, dev string) {
	size := e2eBulk()
	n := newNode(t)
	var net api.NetworkInfo
	n.mustXlane(&net, "network", "create", "nk", "--subnet", "10.78.0.0/24", "--subnet", "fd00:78::/64", "--mode", "tc", "--device", dev)
	if string(net.DeviceType) != dev || net.Mode != "tc" {
		t.Fatalf("network: mode %q device %q, want tc and %s", net.Mode, net.DeviceType, dev)
	}
	var cs []string
	var eps []api.EndpointInfo
	for i := 0; i < 2; i++ {
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "nk", "--netns", c)
		if len(ep.IPs) != 2 || ep.State != "ready" {
			t.Fatalf("endpoint %d: ips %v state %q, want an IPv4 and an IPv6 address, ready", i, ep.IPs, ep.State)
		}
		if !contains(ep.Datapath, "netkit/nkpeer") || !contains(ep.Datapath, "netkit/nkprimary") {
			t.Fatalf("endpoint %d programs %v, want netkit/nkpeer and netkit/nkprimary", i, ep.Datapath)
		}
		cs, eps = append(cs, c), append(eps, ep)
	}
	if out := runIn(t, n.netns, "ip", "-d", "link", "show", eps[0].HostIf); !strings.Contains(out, "netkit") {
		t.Fatalf("host device is not a netkit primary:\n%s", out)
	}
	v4 := func(i int) netip.Addr { return eps[i].IPs[0] }
	v6 := func(i int) netip.Addr { return eps[i].IPs[1] }
	gw4, gw6 := netip.MustParseAddr("10.78.0.1"), netip.MustParseAddr("fd00:78::1")

	// A veth endpoint of a tc network on the same node: tc's
	// bpf_redirect_peer reaches a netkit container, the netkit program's
	// bpf_redirect reaches a veth container.
	n.mustXlane(nil, "network", "create", "v", "--subnet", "10.79.0.0/24", "--mode", "tc", "--device", "veth")
	cv := newNetns(t, "c")
	var ev api.EndpointInfo
	n.mustXlane(&ev, "endpoint", "add", "v", "--netns", cv)

	t.Run("connectivity", func(t *testing.T) {
		ping(t, cs[0], v4(1))
		ping(t, cs[0], v6(1))
		ping(t, cs[1], v4(0))
		ping(t, cs[1], v6(0))
		for _, c := range cs {
			ping(t, c, gw4)
			ping(t, c, gw6)
		}
		ping(t, cs[0], ev.IPs[0])
		ping(t, cv, v4(1))
	})
	t.Run("tcp", func(t *testing.T) {
		transfer(t, cs[0], cs[1], v4(1), size)
		transfer(t, cs[1], cs[0], v6(0), size)
		transfer(t, cs[0], n.netns, gw4, size)
		transfer(t, n.netns, cs[1], v6(1), size/4)
		transfer(t, cs[1], cv, ev.IPs[0], size/4)
		transfer(t, cv, cs[0], v4(0), size/4)
	})
	t.Run("fast path used", func(t *testing.T) {
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", eps[0].ID)
		if c := reason(ep, "fwd_peer", "from_endpoint"); c.Packets < 100 {
			t.Fatalf("fwd_peer from %s = %d packets, want the transfers on the fast path; counters %+v", eps[0].ID, c.Packets, ep.Reasons)
		}
		if c := reason(ep, "deliver", "to_endpoint"); c.Packets < 100 {
			t.Fatalf("deliver to %s = %d packets, want the primary program to count what enters; counters %+v", eps[0].ID, c.Packets, ep.Reasons)
		}
		for _, r := range ep.Reasons {
			if r.Drop && r.Packets > 0 {
				t.Errorf("drop counter %s = %d, want 0", r.Reason, r.Packets)
			}
		}
	})
	t.Run("survives kill -9", func(t *testing.T) {
		n.stop(syscall.SIGKILL)
		ping(t, cs[0], v4(1))
		ping(t, cs[1], v6(0))
		transfer(t, cs[1], cs[0], v4(0), size/4)
	})
	t.Run("restart reconciles", func(t *testing.T) {
		n.start()
		var got []api.EndpointInfo
		n.mustXlane(&got, "endpoint", "ls", "--network", "nk")
		if len(got) != 2 {
			t.Fatalf("after restart: %d endpoints, want 2", len(got))
		}
		for _, e := range got {
			if e.State != "ready" || !contains(e.Datapath, "netkit/nkpeer") {
				t.Errorf("endpoint %s after restart: state %q programs %v", e.ID, e.State, e.Datapath)
			}
		}
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "nk", "--netns", c)
		ping(t, c, v4(0))
		transfer(t, cs[0], cs[1], v4(1), size/4)
		n.mustXlane(nil, "endpoint", "rm", ep.ID)
	})
	t.Run("mode change refused", func(t *testing.T) {
		_, stderr, err := n.xlane("network", "update", "nk", "--mode", "kernel")
		if err == nil || !strings.Contains(stderr, "netkit") {
			t.Fatalf("network update to kernel: err %v stderr %q, want a refusal naming netkit", err, stderr)
		}
	})
	t.Run("remove leaves nothing", func(t *testing.T) {
		for _, e := range eps {
			n.mustXlane(nil, "endpoint", "rm", e.ID)
		}
		n.mustXlane(nil, "endpoint", "rm", ev.ID)
		n.mustXlane(nil, "network", "rm", "nk")
		n.mustXlane(nil, "network", "rm", "v")
		assertCleanNamed(t, n, "10.78.", "fd00:78", "10.79.")
		if ents, err := os.ReadDir(n.pinDir + "/links"); err == nil && len(ents) > 0 {
			t.Errorf("pinned links left: %v", ents)
		}
	})
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
	n.mustXlane(&auto, "network", "create", "a", "--subnet", "10.80.0.0/24", "--device", "auto")
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
	transfer(t, c1, c2, e2.IPs[0], e2eBulk()/4)
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
	if ents, err := os.ReadDir(n.pinDir + "/links"); err == nil && len(ents) > 0 {
		t.Errorf("pinned links or programs left: %v", ents)
	}
}
