package e2e

import (
	"errors"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/features"
)

//	c (guarded net 10.83.0.0/24, fd00:83::/64) --+
//	                                               +-- node up0 ==== out0 outside
//	o (--allow-unsolicited 10.84.0.0/24, fd00:84::/64) --+
//
// The outside routes both subnets to the node, as any machine with a route
// to the container subnets could. Like Docker's bridge, the node lets in
// from off the node only what belongs to a flow the container started (and
// ICMP errors about it) or goes to a published port: unsolicited TCP and
// UDP to an unpublished port are dropped and counted, in every mode. A
// network created with --allow-unsolicited lets them in.
func TestUnsolicited(t *testing.T) {
	for _, tc := range []struct{ name, mode, device string }{
		{"tc", "tc", "veth"},
		{"netkit", "tc", "netkit"},
		{"xdp", "xdp", "veth"},
		{"xdp-generic", "xdp-generic", "veth"},
		{"kernel", "kernel", "veth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.device == "netkit" {
				features.Require(t, features.Netkit)
			}
			var out string
			n := newNode(t, withOutside(&out, "1500"))
			runIn(t, out, "ip", "route", "add", "10.84.0.0/24", "via", "192.0.2.2")
			runIn(t, out, "ip", "-6", "route", "add", "fd00:84::/64", "via", "2001:db8:83::2")
			var gn, on api.NetworkInfo
			n.mustXlane(&gn, "network", "create", "g", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64",
				"--mode", tc.mode, "--device", tc.device, "--masquerade=false")
			n.mustXlane(&on, "network", "create", "o", "--subnet", "10.84.0.0/24", "--subnet", "fd00:84::/64",
				"--mode", tc.mode, "--device", tc.device, "--masquerade=false", "--allow-unsolicited")
			if gn.AllowUnsolicited || !on.AllowUnsolicited {
				t.Fatalf("allow_unsolicited: g %v, o %v; want false, true", gn.AllowUnsolicited, on.AllowUnsolicited)
			}
			if s, e, err := n.xlane("network", "inspect", "o"); err != nil || !strings.Contains(s, "unsolicited:") || !strings.Contains(s, "allowed") {
				t.Errorf("network inspect o does not say unsolicited flows are allowed: %v %s\n%s", err, e, s)
			}
			c, o := newNetns(t, "c"), newNetns(t, "c")
			var ec, eo api.EndpointInfo
			n.mustXlane(&ec, "endpoint", "add", "g", "--netns", c)
			n.mustXlane(&eo, "endpoint", "add", "o", "--netns", o)
			o4, o6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:83::1")

			for _, dst := range ec.IPs {
				t.Run("refused/"+family(dst), func(t *testing.T) {
					unsolicitedRefused(t, out, c, netip.AddrPortFrom(dst, 8080), netip.AddrPortFrom(dst, 9090))
				})
			}
			for _, dst := range eo.IPs {
				t.Run("allowed/"+family(dst), func(t *testing.T) {
					transfer(t, out, o, dst, bulk/8)
					if got := udpReaches(t, out, o, netip.AddrPortFrom(dst, 9090)); got == 0 {
						t.Errorf("no datagram from the outside reached %s:9090 on an --allow-unsolicited network", dst)
					}
				})
			}
			// What the container starts still gets its answers: TCP, UDP,
			// ping, and the ICMP error about a closed port.
			for _, dst := range []netip.Addr{o4, o6} {
				t.Run("replies/"+family(dst), func(t *testing.T) {
					transfer(t, c, out, dst, bulk/8)
					udpEcho(t, c, out, netip.AddrPortFrom(dst, 7007))
					ping(t, c, dst)
					if err := udpRefused(c, dst, 7999, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
						t.Errorf("UDP to a closed port of the outside: %v, want the port unreachable to reach the container", err)
					}
				})
			}
			// And the node and other containers of the node still reach
			// it (the node's own traffic is not forwarded).
			t.Run("local", func(t *testing.T) {
				transfer(t, n.netns, c, ec.IPs[0], bulk/8)
				transfer(t, n.netns, c, ec.IPs[1], bulk/8)
				transfer(t, o, c, ec.IPs[0], bulk/8)
			})
			t.Run("counted", func(t *testing.T) {
				if tc.mode == "kernel" {
					table := run(t, "nsenter", "--net="+nsPath(n.netns), "--", "nft", "list", "table", "inet", "xlane_guard"+strconv.Itoa(int(gn.ID)))
					if m := regexp.MustCompile(`counter packets (\d+)`).FindAllStringSubmatch(table, -1); len(m) == 0 || sumMatches(m) == 0 {
						t.Errorf("kernel mode: no unsolicited packet counted by the nftables guard:\n%s", table)
					}
					return
				}
				var got api.EndpointInfo
				n.mustXlane(&got, "endpoint", "inspect", ec.ID)
				if c := reasonCounter(got, "drop_unsolicited", "to_endpoint"); c.Packets == 0 || !c.Drop {
					t.Errorf("drop_unsolicited = %+v, want the refused packets counted as a drop; %+v", c, got.Reasons)
				}
				n.mustXlane(&got, "endpoint", "inspect", eo.ID)
				if c := reason(got, "drop_unsolicited", "to_endpoint"); c.Packets != 0 {
					t.Errorf("drop_unsolicited on the --allow-unsolicited network = %d", c.Packets)
				}
			})
		})
	}
}

// TestUnsolicitedPublished: on a masqueraded network, a published port is
// reached from the outside; the same container's unpublished port, with
// the outside holding a route to it, is not.
func TestUnsolicitedPublished(t *testing.T) {
	for _, mode := range []string{"tc", "xdp"} {
		t.Run(mode, func(t *testing.T) {
			var out string
			n := newNode(t, withOutside(&out, "1500"))
			n.mustXlane(nil, "network", "create", "p", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--mode", mode)
			c := newNetns(t, "c")
			var ep api.EndpointInfo
			n.mustXlane(&ep, "endpoint", "add", "p", "--netns", c)
			n.mustXlane(nil, "endpoint", "publish", ep.ID, "--port", "8080:80/tcp")
			transferVia(t, out, c, netip.AddrPortFrom(ep.IPs[0], 80), netip.MustParseAddrPort("192.0.2.2:8080"), bulk/8)
			transferVia(t, out, c, netip.AddrPortFrom(ep.IPs[1], 80), netip.MustParseAddrPort("[2001:db8:83::2]:8080"), bulk/8)
			for _, dst := range ep.IPs {
				unsolicitedRefused(t, out, c, netip.AddrPortFrom(dst, 81), netip.AddrPortFrom(dst, 9090))
			}
		})
	}
}

func reasonCounter(ep api.EndpointInfo, name, dir string) api.ReasonCounter {
	for _, r := range ep.Reasons {
		if r.Reason == name && r.Direction == dir {
			return r
		}
	}
	return api.ReasonCounter{}
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "ipv4"
	}
	return "ipv6"
}

func sumMatches(m [][]string) int {
	s := 0
	for _, x := range m {
		v, _ := strconv.Atoi(x[1])
		s += v
	}
	return s
}

// unsolicitedRefused checks that the outside (netns out) can neither
// connect to tcp nor send datagrams to udp, both listened on in netns ctr.
func unsolicitedRefused(t *testing.T, out, ctr string, tcp, udp netip.AddrPort) {
	t.Helper()
	acceptAndClose(listenIn(t, ctr, tcp))
	if err := dialOnce(out, tcp); err == nil {
		t.Errorf("the outside connected to unpublished %s", tcp)
	}
	if got := udpReaches(t, out, ctr, udp); got > 0 {
		t.Errorf("%d unsolicited datagrams from the outside reached %s", got, udp)
	}
}

// udpReaches sends 5 datagrams from netns from to addr, where netns to
// listens, and returns how many arrived.
func udpReaches(t *testing.T, from, to string, addr netip.AddrPort) int {
	t.Helper()
	srv, c := udpPair(t, from, to, addr)
	defer srv.Close()
	defer c.Close()
	for i := 0; i < 5; i++ {
		c.Write([]byte("unsolicited"))
	}
	got := 0
	buf := make([]byte, 64)
	srv.SetReadDeadline(time.Now().Add(time.Second))
	for {
		if _, err := srv.Read(buf); err != nil {
			return got
		}
		got++
	}
}
