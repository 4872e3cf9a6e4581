package e2e

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestMultiNodeKernels is the cross-node subset of the kernel matrix
// (scripts/test-kernels.sh, docs/kernels.md): two nodes over VXLAN on an
// IPv4 underlay, one pod each, in one mode per kernel: `tc` where the kernel
// has no tcx (legacy tc, 6.1), `xdp` where it has (its cross-node packets
// handed to tcx, pass_overlay). Ping and SHA-256-checked TCP both ways for
// IPv4 and IPv6, a service whose backend is on the other node, the fast
// path's counters, a node removed (drop_no_peer) and re-added. n1
// encapsulates in BPF (--overlay-encap auto), n2 in its VXLAN device
// (device): each transfer's sender takes one path, and each receiver's
// device decapsulates the other's. Most of its
// time in a guest is the two daemons' program loads (docs/kernels.md);
// TestMultiNode, on the host, covers the rest (three nodes, MTU 9000, the
// IPv6 underlay, native routing).
func TestMultiNodeKernels(t *testing.T) {
	start := time.Now()
	lap := func(what string) {
		t.Logf("%-28s %6.1f s", what, time.Since(start).Seconds())
		start = time.Now()
	}
	cs := newNodePairEach(t, nil, []string{"--overlay-encap", "device"})
	lap("two xlaned up, nodes added")
	for i, want := range []string{"bpf", "device"} {
		var st api.Status
		cs[i].mustXlane(&st, "status")
		if st.Cluster == nil || st.Cluster.OverlayEncap != want {
			t.Fatalf("%s: status cluster %+v, want overlay encapsulation %s", cs[i].name, st.Cluster, want)
		}
	}
	mode := "xdp"
	if !hasTCX(t, cs[0].node) {
		mode = "tc"
	}
	for _, c := range cs {
		requireMode(t, c.node, mode)
		c.mustXlane(nil, "network", "create", "pods", "--mode", mode)
		c.pod = newNetns(t, "pod")
		c.mustXlane(&c.ep, "endpoint", "add", "pods", "--netns", c.pod)
		if len(c.ep.IPs) != 2 {
			t.Fatalf("%s: endpoint ips %v", c.name, c.ep.IPs)
		}
	}
	lap("networks, pods (" + mode + ")")
	ping(t, cs[0].pod, cs[1].ip4())
	ping(t, cs[0].pod, cs[1].ip6())
	ping(t, cs[1].pod, cs[0].ip4())
	ping(t, cs[1].pod, cs[0].ip6())
	lap("ping")
	size := bulkSize(16<<20) / 2
	tx0, tx1 := overlayTxBytes(t, cs[0]), overlayTxBytes(t, cs[1])
	transfer(t, cs[0].pod, cs[1].pod, cs[1].ip4(), size)
	transfer(t, cs[1].pod, cs[0].pod, cs[0].ip6(), size)
	lap("tcp")
	// n1's packets bypassed its VXLAN device (encapsulated in BPF, TSO'd
	// super-packets included), n2's went through its own.
	if d := overlayTxBytes(t, cs[0]) - tx0; d > uint64(size)/8 {
		t.Errorf("n1 (bpf encapsulation): its VXLAN device sent %d bytes during a %d-byte transfer, want next to none", d, size)
	}
	if d := overlayTxBytes(t, cs[1]) - tx1; d < uint64(size) {
		t.Errorf("n2 (device encapsulation): its VXLAN device sent %d bytes, want the %d-byte transfer's", d, size)
	}
	var ep api.EndpointInfo
	cs[0].mustXlane(&ep, "endpoint", "inspect", cs[0].ep.ID)
	if c := reason(ep, "fwd_overlay", "from_endpoint"); c.Bytes < uint64(size) {
		t.Errorf("fwd_overlay from %s = %d bytes, want at least the transfer's %d; counters %+v", ep.ID, c.Bytes, size, ep.Reasons)
	} else if mode == "tc" && c.Bytes/c.Packets <= 1500 {
		// What the BPF encapsulation took were TSO super-packets (and
		// their segments arrived intact: the transfer's SHA-256). Not
		// in xdp mode: XDP on the host veth turns TSO off on the pod's.
		t.Errorf("fwd_overlay from %s: %d packets of %d bytes on average, want GSO super-packets (above the MTU)", ep.ID, c.Packets, c.Bytes/c.Packets)
	}
	if mode == "xdp" {
		if c := reason(ep, "pass_overlay", "from_endpoint"); c.Packets != 0 {
			t.Errorf("pass_overlay counted %d times at the endpoint: the hand-off to tc is counted once, as fwd_overlay", c.Packets)
		}
	}
	for _, r := range ep.Reasons {
		if r.Drop && r.Packets > 0 {
			t.Errorf("drop counter %s = %d, want 0", r.Reason, r.Packets)
		}
	}
	vip := netip.MustParseAddrPort("10.96.0.10:8080")
	cs[0].mustXlane(nil, "service", "create", "web", "--vip", vip.String(), "--backend", netip.AddrPortFrom(cs[1].ip4(), 9090).String())
	transferVia(t, cs[0].pod, cs[1].pod, netip.AddrPortFrom(cs[1].ip4(), 9090), vip, size/4)
	lap("service")
	cs[0].mustXlane(nil, "node", "rm", "n2")
	if out, err := inNS(cs[0].pod, "ping", "-c", "1", "-W", "1", cs[1].ip4().String()).CombinedOutput(); err == nil {
		t.Errorf("ping to a removed node's pod went through:\n%s", out)
	}
	cs[0].mustXlane(&ep, "endpoint", "inspect", cs[0].ep.ID)
	if c := reason(ep, "drop_no_peer", "from_endpoint"); c.Packets == 0 {
		t.Errorf("drop_no_peer not counted for the removed node's pod; counters %+v", ep.Reasons)
	}
	cs[0].mustXlane(nil, cs[1].addArgs()...)
	ping(t, cs[0].pod, cs[1].ip6())
	lap("node removed, re-added")
	testPeerDown(t, cs)
	lap("peer down and back")
}

// testPeerDown: n2 disappears from the underlay without being removed
// (its bridge port down): n1's probes find it down, its pods' packets are
// dropped and counted (drop_peer_down) rather than lost on the underlay,
// and node ls says so; it comes back when the port does.
func testPeerDown(t *testing.T, cs []*clusterNode) {
	t.Helper()
	var before api.EndpointInfo
	cs[0].mustXlane(&before, "endpoint", "inspect", cs[0].ep.ID)
	run(t, "ip", "-n", cs[0].ul, "link", "set", "p2", "down")
	down := waitPeerState(t, cs[0], "n2", model.PeerDown)
	if down.Address != cs[1].under4 {
		t.Errorf("n2 probed at %s, want its underlay address %s", down.Address, cs[1].under4)
	}
	for _, a := range []netip.Addr{cs[1].ip4(), cs[1].ip6()} {
		if out, err := inNS(cs[0].pod, "ping", "-c", "2", "-i", "0.2", "-W", "1", a.String()).CombinedOutput(); err == nil {
			t.Errorf("ping %s on a down peer went through:\n%s", a, out)
		}
	}
	var after api.EndpointInfo
	cs[0].mustXlane(&after, "endpoint", "inspect", cs[0].ep.ID)
	if b, a := reason(before, "drop_peer_down", "from_endpoint"), reason(after, "drop_peer_down", "from_endpoint"); a.Packets < b.Packets+4 {
		t.Errorf("drop_peer_down from %s: %d before, %d after 4 pings to the down peer's pod; want +4", cs[0].ep.ID, b.Packets, a.Packets)
	}
	if out, _, err := cs[0].xlane("node", "ls", "-o", "table"); err != nil || !strings.Contains(out, "down since") {
		t.Errorf("node ls: %v, %q; want n2 down", err, out)
	}
	// The peer's own view: n1 is down too (its port's carrier went).
	waitPeerState(t, cs[1], "n1", model.PeerDown)
	run(t, "ip", "-n", cs[0].ul, "link", "set", "p2", "up")
	waitPeerState(t, cs[0], "n2", model.PeerUp)
	waitPeerState(t, cs[1], "n1", model.PeerUp)
	ping(t, cs[0].pod, cs[1].ip4())
	ping(t, cs[1].pod, cs[0].ip6())
}

// waitPeerState waits until c's daemon says node name is in state.
func waitPeerState(t *testing.T, c *clusterNode, name, state string) model.NodeLiveness {
	t.Helper()
	var n model.Node
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c.mustXlane(&n, "node", "inspect", name)
		if n.Liveness != nil && n.Liveness.State == state {
			return *n.Liveness
		}
	}
	t.Fatalf("%s: node %s liveness %+v, want %s", c.name, name, n.Liveness, state)
	return model.NodeLiveness{}
}

// hasTCX says whether the daemon found tcx (6.6+): without it, tc mode
// runs on legacy tc.
func hasTCX(t *testing.T, n *node) bool {
	t.Helper()
	var st api.Status
	n.mustXlane(&st, "status")
	for _, f := range st.Features {
		if f.Name == "tcx" {
			return f.Available
		}
	}
	t.Fatalf("xlane status: no tcx feature in %+v", st.Features)
	return false
}
