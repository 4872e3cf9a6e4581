package e2e

import (
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/features"
)

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
	size := bulk
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
		noDrops(t, ep)
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
	t.Run("nat refused", func(t *testing.T) {
		// No conntrack/NAT stage on netkit yet: refused, never untranslated.
		_, stderr, err := n.xlane("network", "create", "nkm", "--subnet", "10.88.0.0/24", "--device", dev, "--masquerade")
		if err == nil || !strings.Contains(stderr, "netkit") {
			t.Errorf("netkit network with --masquerade: err %v stderr %q, want a refusal naming netkit", err, stderr)
		}
		_, stderr, err = n.xlane("endpoint", "publish", eps[0].ID, "--port", "8080:80")
		if err == nil || !strings.Contains(stderr, "netkit") {
			t.Errorf("publish on a netkit endpoint: err %v stderr %q, want a refusal naming netkit", err, stderr)
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
		if pins := endpointPins(n); len(pins) > 0 {
			t.Errorf("endpoint links left pinned: %v", pins)
		}
	})
}
