package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// A runtime that moves the interface itself (Docker) asks for a veth-only
// endpoint: xlane creates the pair and programs the host side; the runtime
// moves the peer and configures the container side. Traffic then flows on
// the tc fast path like any endpoint's.
func TestVethOnlyEndpoint(t *testing.T) {
	for _, mode := range []string{"tc", "xdp"} {
		t.Run(mode, func(t *testing.T) { testVethOnly(t, mode) })
	}
}

func testVethOnly(t *testing.T, mode string) {
	n := newNode(t)
	requireMode(t, n, mode) // kernel_test.go
	n.mustXlane(nil, "network", "create", "v", "--subnet", "10.82.0.0/24", "--mode", mode)
	c1 := newNetns(t, "c")
	var normal api.EndpointInfo
	n.mustXlane(&normal, "endpoint", "add", "v", "--netns", c1)

	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "v", "--veth-only", "--id", "runtime-ctr")
	if ep.Netns != "" || ep.PeerIf == "" || ep.MAC == "" || len(ep.IPs) != 1 {
		t.Fatalf("veth-only endpoint %+v: want no netns, a peer name, its MAC and one address", ep)
	}
	if links := runIn(t, n.netns, "ip", "-o", "link", "show", ep.PeerIf); !strings.Contains(links, ep.PeerIf) {
		t.Fatalf("peer %s not in the node namespace:\n%s", ep.PeerIf, links)
	}
	// Play the runtime: move the peer, name it, address it as xlane would.
	c2 := newNetns(t, "c")
	runIn(t, n.netns, "ip", "link", "set", ep.PeerIf, "netns", nsPath(c2), "name", "eth0")
	a := ep.IPs[0].String()
	runIn(t, c2, "ip", "addr", "add", a+"/24", "dev", "eth0")
	runIn(t, c2, "ip", "link", "set", "eth0", "up")
	runIn(t, c2, "ip", "route", "add", "default", "via", "10.82.0.1")

	// On-link /24 (as Docker configures it): the container ARPs for its
	// peer directly and the host veth answers by proxy ARP.
	ping(t, c2, normal.IPs[0])
	ping(t, c1, ep.IPs[0])
	ping(t, c2, netip.MustParseAddr("10.82.0.1"))
	transfer(t, c2, c1, normal.IPs[0], bulk/4)

	var got api.EndpointInfo
	n.mustXlane(&got, "endpoint", "inspect", "runtime-ctr")
	if c := reason(got, "fwd_peer", "from_endpoint"); c.Packets < 100 {
		t.Errorf("veth-only endpoint fwd_peer = %d packets, want the transfer on the fast path", c.Packets)
	}
	n.mustXlane(nil, "endpoint", "rm", "runtime-ctr")
	n.mustXlane(nil, "endpoint", "rm", normal.ID)
	n.mustXlane(nil, "network", "rm", "v")
	assertCleanNamed(t, n, "10.82.")
}
