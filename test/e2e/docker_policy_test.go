package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// noTCP checks that a connection from netns from to dst, where netns to
// listens, does not get through.
func noTCP(t *testing.T, from, to string, dst netip.AddrPort) {
	t.Helper()
	ln := listenIn(t, to, dst)
	defer ln.Close()
	acceptAndClose(ln)
	if err := dialOnce(from, dst); err == nil {
		t.Errorf("TCP to %s from %s got through, want it refused", dst, from)
	}
}

// TestDockerNetworkPolicy: ICC off (-o com.docker.network.bridge.enable_icc=false)
// and the isolation of Docker networks from each other, under a real
// dockerd.
//
//	network  subnets                      docker options
//	quiet    10.95.0.0/24, fd00:95::/64    --ipv6, enable_icc=false: q1, q2, qw (-p 8081:80)
//	blue     10.95.1.0/24, fd00:95:1::/64  --ipv6: b1
//	green    10.95.2.0/24                  g1 (and b1 for a while: docker network connect)
//	open     10.95.3.0/24                  an xlane CLI network (not isolated): x1
//	open2    10.95.4.0/24                  another one: x2
//
// Checked: containers of quiet do not reach each other (ICMP, TCP, both
// families) but reach the gateway, the node and the outside, and their
// published port answers the outside, the node and, through the node's
// address, containers of the same and other networks (as Docker's
// userland proxy relays them); containers of
// different Docker networks do not reach each other, nor xlane's own
// networks, while those keep reaching each other; a container on two
// networks reaches each network's containers; the drops are counted
// (drop_icc, drop_isolated).
func TestDockerNetworkPolicy(t *testing.T) {
	var out string
	h := newDockerHost(t, withDockerOutside(&out))
	n := h.n
	o4, o6 := netip.MustParseAddr("10.97.0.2"), netip.MustParseAddr("fd00:97::2")
	node4, node6 := netip.MustParseAddr("10.97.0.1"), netip.MustParseAddr("fd00:97::1")
	const size = 4 << 20

	quiet := h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.95.0.0/24", "--ipv6", "--subnet", "fd00:95::/64",
		"-o", "com.docker.network.bridge.enable_icc=false", "quiet")
	blue := h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.95.1.0/24", "--ipv6", "--subnet", "fd00:95:1::/64", "blue")
	h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.95.2.0/24", "green")
	for name, want := range map[string][2]bool{"docker-" + quiet[:12]: {true, true}, "docker-" + blue[:12]: {false, true}} {
		var info api.NetworkInfo
		n.mustXlane(&info, "network", "inspect", name)
		if info.ICCOff != want[0] || info.Isolated != want[1] {
			t.Errorf("xlane network %s: icc_off %v isolated %v, want %v %v", name, info.ICCOff, info.Isolated, want[0], want[1])
		}
	}

	q1, q2 := h.run("q1", "--network", "quiet"), h.run("q2", "--network", "quiet")
	qw := h.run("qw", "--network", "quiet", "-p", "8081:80")
	a1, a2, aw := h.attachment(q1, "quiet"), h.attachment(q2, "quiet"), h.attachment(qw, "quiet")
	t.Run("icc off", func(t *testing.T) {
		ns1, ns2 := h.ns(q1), h.ns(q2)
		noPing(t, ns1, a2.v4())
		noPing(t, ns1, a2.v6())
		noPing(t, ns2, a1.v4())
		noPing(t, ns2, a1.v6())
		noTCP(t, ns1, ns2, netip.AddrPortFrom(a2.v4(), 80))
		noTCP(t, ns2, ns1, netip.AddrPortFrom(a1.v6(), 80))
		if _, err := h.docker("exec", q1, "ping", "-c", "1", "-W", "1", a2.IPAddress); err == nil {
			t.Errorf("docker exec q1 ping q2 went through")
		}
		// The gateway, the node, the outside.
		ping(t, ns1, netip.MustParseAddr("10.95.0.1"))
		ping(t, ns1, netip.MustParseAddr("fd00:95::1"))
		ping(t, n.netns, a1.v4())
		ping(t, n.netns, a2.v6())
		ping(t, ns1, o4)
		ping(t, ns2, o6)
		transfer(t, ns1, out, o4, size)
		transfer(t, n.netns, ns2, a2.v4(), size)
		// The published port, from the outside and from the node.
		nsw := h.ns(qw)
		transferVia(t, out, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8081), size)
		transferVia(t, n.netns, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8081), size)
		transferVia(t, n.netns, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.MustParseAddrPort("127.0.0.1:8081"), size)
		// From q1 through the node's address, as Docker's userland proxy
		// relays it on an ICC-off bridge (docs/docker.md).
		transferVia(t, ns1, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8081), size)
		transferVia(t, ns1, nsw, netip.AddrPortFrom(aw.v6(), 80), netip.AddrPortFrom(node6, 8081), size)
		noTCP(t, ns1, nsw, netip.AddrPortFrom(aw.v4(), 80)) // straight to qw: still apart
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", a1.EndpointID)
		if c := reason(ep, "drop_icc", "from_endpoint"); c.Packets == 0 {
			t.Errorf("q1 drop_icc not counted: %+v", ep.Reasons)
		}
	})

	b1, g1 := h.run("b1", "--network", "blue"), h.run("g1", "--network", "green")
	ab, ag := h.attachment(b1, "blue"), h.attachment(g1, "green")
	t.Run("docker networks apart", func(t *testing.T) {
		nsb, nsg := h.ns(b1), h.ns(g1)
		// Reachable by routes (the containers' default route is the node),
		// refused by the datapath.
		noPing(t, nsb, ag.v4())
		noPing(t, nsg, ab.v4())
		noPing(t, nsb, a1.v4())
		noPing(t, h.ns(q1), ab.v4())
		noTCP(t, nsb, nsg, netip.AddrPortFrom(ag.v4(), 80))
		noTCP(t, nsg, nsb, netip.AddrPortFrom(ab.v4(), 80))
		ping(t, nsb, netip.MustParseAddr("10.95.1.1"))
		ping(t, nsb, o4)
		ping(t, nsg, o4)
		ping(t, n.netns, ab.v4())
		ping(t, n.netns, ag.v4())
		// Published ports still answer the outside and the node.
		transferVia(t, out, h.ns(qw), netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8081), size)
		// And to containers of other networks through the node's
		// address, as Docker's userland proxy relays them (issue 13);
		// straight to qw they stay apart.
		transferVia(t, nsb, h.ns(qw), netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8081), size)
		transferVia(t, nsb, h.ns(qw), netip.AddrPortFrom(aw.v6(), 80), netip.AddrPortFrom(node6, 8081), size)
		noTCP(t, nsb, h.ns(qw), netip.AddrPortFrom(aw.v6(), 80))
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", ab.EndpointID)
		if c := reason(ep, "drop_isolated", "from_endpoint"); c.Packets == 0 {
			t.Errorf("b1 drop_isolated not counted: %+v", ep.Reasons)
		}
		// On both networks, b1 reaches green's containers through green.
		h.mustDocker("network", "connect", "green", b1)
		ping(t, nsb, ag.v4())
		transfer(t, nsb, nsg, ag.v4(), size)
		ping(t, nsg, h.attachment(b1, "green").v4())
		h.mustDocker("network", "disconnect", "green", b1)
		noPing(t, nsb, ag.v4())
	})

	t.Run("xlane networks", func(t *testing.T) {
		// xlane's own networks are not isolated unless asked: they reach
		// each other, but not the Docker networks.
		n.mustXlane(nil, "network", "create", "open", "--subnet", "10.95.3.0/24")
		n.mustXlane(nil, "network", "create", "open2", "--subnet", "10.95.4.0/24")
		c1, c2 := newNetns(t, "x1"), newNetns(t, "x2")
		var x1, x2 api.EndpointInfo
		n.mustXlane(&x1, "endpoint", "add", "open", "--netns", c1)
		n.mustXlane(&x2, "endpoint", "add", "open2", "--netns", c2)
		ping(t, c1, x2.IPs[0])
		ping(t, c2, x1.IPs[0])
		noPing(t, c1, ab.v4())
		noPing(t, h.ns(b1), x1.IPs[0])
		var info api.NetworkInfo
		n.mustXlane(&info, "network", "inspect", "open")
		if info.Isolated || info.ICCOff {
			t.Errorf("xlane network open: isolated %v icc_off %v, want neither", info.Isolated, info.ICCOff)
		}
		// xlane network create --icc=false: the same as Docker's option.
		n.mustXlane(nil, "network", "create", "shut", "--subnet", "10.95.5.0/24", "--icc=false")
		c3, c4 := newNetns(t, "x3"), newNetns(t, "x4")
		var x3, x4 api.EndpointInfo
		n.mustXlane(&x3, "endpoint", "add", "shut", "--netns", c3)
		n.mustXlane(&x4, "endpoint", "add", "shut", "--netns", c4)
		noPing(t, c3, x4.IPs[0])
		noTCP(t, c4, c3, netip.AddrPortFrom(x3.IPs[0], 80))
		ping(t, c3, netip.MustParseAddr("10.95.5.1"))
		ping(t, c3, o4)
		ping(t, c3, x1.IPs[0]) // not isolated: other xlane networks still
		n.mustXlane(&info, "network", "inspect", "shut")
		if !info.ICCOff || info.Isolated {
			t.Errorf("xlane network shut: icc_off %v isolated %v, want true false", info.ICCOff, info.Isolated)
		}
		if _, stderr, err := n.xlane("network", "create", "kshut", "--subnet", "10.95.6.0/24", "--mode", "kernel", "--masquerade=false", "--icc=false"); err == nil || !strings.Contains(stderr, "mode kernel has no datapath") {
			t.Errorf("--icc=false in kernel mode: %v %s, want a refusal", err, stderr)
		}
		for _, id := range []string{x1.ID, x2.ID, x3.ID, x4.ID} {
			n.mustXlane(nil, "endpoint", "rm", id)
		}
		for _, name := range []string{"open", "open2", "shut"} {
			n.mustXlane(nil, "network", "rm", name)
		}
	})

	t.Run("network rm", func(t *testing.T) {
		h.mustDocker("rm", "-f", q1, q2, qw, b1, g1)
		for _, name := range []string{"quiet", "blue", "green"} {
			h.mustDocker("network", "rm", name)
		}
		var xnets []api.NetworkInfo
		n.mustXlane(&xnets, "network", "ls")
		if len(xnets) != 0 {
			t.Errorf("xlane networks left: %+v", xnets)
		}
		assertCleanNamed(t, n, "10.95.", "fd00:95")
	})
}
