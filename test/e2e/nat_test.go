package e2e

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

//	c1, c2 --- node [xlaned --uplink up0] up0 192.0.2.2 ==== 192.0.2.1 outside
//
// The outside has no route to the container subnets: only masquerade lets
// containers reach it, and only published ports let it reach containers.
func TestMasqueradeAndPublish(t *testing.T) {
	for _, mode := range []string{"tc", "xdp", "xdp-generic"} {
		t.Run(mode, func(t *testing.T) {
			var out string
			n := newNode(t, withOutsideRoutes(&out, "1500", false))
			n.mustXlane(nil, "network", "create", "nat", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--mode", mode)
			c1, c2 := newNetns(t, "c"), newNetns(t, "c")
			var e1, e2 api.EndpointInfo
			n.mustXlane(&e1, "endpoint", "add", "nat", "--netns", c1)
			n.mustXlane(&e2, "endpoint", "add", "nat", "--netns", c2)
			o4, o6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:83::1")
			node4, node6 := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8:83::2")

			t.Run("masquerade", func(t *testing.T) {
				ping(t, c1, o4)
				ping(t, c1, o6)
				transfer(t, c1, out, o4, bulk)
				transfer(t, c2, out, o6, bulk/2)
				udpEcho(t, c1, out, netip.AddrPortFrom(o4, 7007))
				udpEcho(t, c2, out, netip.AddrPortFrom(o6, 7007))
				// The outside saw the node's address, never a container's.
				var flows []api.Flow
				n.mustXlane(&flows, "ct", "ls", "--limit", "0")
				snat := 0
				for _, f := range flows {
					if f.NAT == "snat" && f.Direction == "original" {
						snat++
						if !strings.HasPrefix(f.NATTo, "192.0.2.2:") && !strings.HasPrefix(f.NATTo, "[2001:db8:83::2]:") {
							t.Errorf("snat to %s, want the node's uplink address", f.NATTo)
						}
					}
				}
				if snat < 4 {
					t.Errorf("%d snat flows in conntrack, want at least 4 (tcp, udp, icmp); %+v", snat, flows)
				}
			})
			t.Run("published ports", func(t *testing.T) {
				n.mustXlane(nil, "endpoint", "publish", e1.ID, "--port", "8080:80/tcp")
				var got api.EndpointInfo
				n.mustXlane(&got, "endpoint", "inspect", e1.ID)
				if len(got.Ports) != 1 || got.Ports[0].NodePort != 8080 {
					t.Fatalf("published ports %+v, want 8080:80/tcp", got.Ports)
				}
				// From outside, IPv4 and IPv6, to the node's address.
				transferVia(t, out, c1, netip.AddrPortFrom(e1.IPs[0], 80), netip.AddrPortFrom(node4, 8080), bulk)
				transferVia(t, out, c1, netip.AddrPortFrom(e1.IPs[1], 80), netip.AddrPortFrom(node6, 8080), bulk/2)
				// From another container on the node, and from the node.
				transferVia(t, c2, c1, netip.AddrPortFrom(e1.IPs[0], 80), netip.AddrPortFrom(node4, 8080), bulk/2)
				transferVia(t, n.netns, c1, netip.AddrPortFrom(e1.IPs[0], 80), netip.AddrPortFrom(node4, 8080), bulk/4)
				transferVia(t, n.netns, c1, netip.AddrPortFrom(e1.IPs[1], 80), netip.AddrPortFrom(node6, 8080), bulk/4)
				// Another endpoint cannot take the same node port.
				if _, stderr, err := n.xlane("endpoint", "publish", e2.ID, "--port", "8080:81/tcp"); err == nil || !strings.Contains(stderr, "is published by endpoint") {
					t.Errorf("second publish of 8080/tcp: err %v stderr %q, want a conflict", err, stderr)
				}
				n.mustXlane(nil, "endpoint", "unpublish", e1.ID, "--port", "8080/tcp")
				if err := dialOnce(out, netip.AddrPortFrom(node4, 8080)); err == nil {
					t.Errorf("node port 8080 still answers after unpublish")
				}
			})
			t.Run("flush and stats", func(t *testing.T) {
				var st api.CTStats
				n.mustXlane(&st, "ct", "stats")
				if st.Entries == 0 || st.BytesPerEntry == 0 || st.MaxEntries != 1<<20 {
					t.Errorf("ct stats %+v: want entries, a per-entry size and the default 1Mi table", st)
				}
				n.mustXlane(nil, "ct", "flush")
				n.mustXlane(&st, "ct", "stats")
				if st.Entries > 4 { // a few packets may arrive meanwhile
					t.Errorf("after flush: %d entries", st.Entries)
				}
			})
		})
	}
}

// udpEcho sends a datagram from netns from to an echo server it starts in
// netns to, and checks the answer comes back.
func udpEcho(t *testing.T, from, to string, addr netip.AddrPort) {
	t.Helper()
	srv, c := udpPair(t, from, to, addr)
	defer srv.Close()
	defer c.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, peer, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			srv.WriteToUDPAddrPort(buf[:n], peer)
		}
	}()
	buf := make([]byte, 64)
	for try := 0; try < 3; try++ {
		c.Write([]byte("xlane udp echo"))
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(buf); err == nil && string(buf[:n]) == "xlane udp echo" {
			return
		}
	}
	t.Fatalf("no UDP echo from %s via %s", addr, from)
}

func dialOnce(from string, addr netip.AddrPort) error {
	c, err := dialIn(from, addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// Where the datapath cannot translate (kernel mode), NAT is refused with a
// reason rather than half-working; xdp-generic translates (the tc program
// behind generic XDP sees the MAC header since issue 11) and so masquerades
// by default, publishes ports and takes a masquerading network.
func TestNATRefusedWhereUnsupported(t *testing.T) {
	n := newNode(t)
	if _, stderr, err := n.xlane("network", "create", "xkernel", "--subnet", "10.87.0.0/24", "--mode", "kernel", "--masquerade"); err == nil || !strings.Contains(stderr, "masquerade") {
		t.Errorf("kernel with --masquerade: err %v stderr %q, want a refusal naming masquerade", err, stderr)
	}
	var net api.NetworkInfo
	n.mustXlane(&net, "network", "create", "g", "--subnet", "10.87.0.0/24", "--mode", "xdp-generic")
	if !net.Masquerade {
		t.Errorf("xdp-generic network does not default to masquerade")
	}
	c := newNetns(t, "c")
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "g", "--netns", c)
	n.mustXlane(nil, "endpoint", "publish", ep.ID, "--port", "8080:80")
	var tcnet api.NetworkInfo
	n.mustXlane(&tcnet, "network", "create", "t", "--subnet", "10.88.0.0/24")
	if !tcnet.Masquerade {
		t.Errorf("default (tc) network does not masquerade")
	}
	if _, stderr, err := n.xlane("network", "update", "t", "--mode", "kernel"); err == nil || !strings.Contains(stderr, "masquerade") {
		t.Errorf("switching a masquerading network to kernel: err %v stderr %q, want a refusal", err, stderr)
	}
	n.mustXlane(nil, "network", "update", "t", "--mode", "xdp-generic")
}
