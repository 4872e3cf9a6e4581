package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// withOutside gives the node an uplink veth "up0" to an "outside" namespace
// that is both the node's router and a remote host:
//
//	container --- node [xlaned --uplink up0] up0 ======= out0 [outside]
//	10.83.0.x                       192.0.2.2     192.0.2.1, 2001:db8:83::1
//
// The outside routes the container subnets to the node. GRO on out0 gives
// it the NAPI that XDP_REDIRECT into up0 needs (a NIC does not).
func withOutside(out *string, mtu string) nodeOpt {
	return withOutsideRoutes(out, mtu, true)
}

// withOutsideRoutes is withOutside; without routes the outside cannot
// reach container addresses, only the node's (masquerade).
func withOutsideRoutes(out *string, mtu string, routes bool) nodeOpt {
	return func(n *node) {
		t := n.t
		*out = newNetns(t, "out")
		runIn(t, n.netns, "ip", "link", "add", "up0", "mtu", mtu, "type", "veth", "peer", "name", "out0", "mtu", mtu, "netns", nsPath(*out))
		for _, c := range [][]string{
			{"ip", "addr", "add", "192.0.2.2/24", "dev", "up0"},
			{"ip", "addr", "add", "2001:db8:83::2/64", "dev", "up0", "nodad"},
			{"ip", "link", "set", "up0", "up"},
			{"ip", "route", "add", "default", "via", "192.0.2.1"},
			{"ip", "-6", "route", "add", "default", "via", "2001:db8:83::1"},
			{"sysctl", "-qw", "net.ipv4.conf.up0.forwarding=1", "net.ipv6.conf.all.forwarding=1"},
		} {
			runIn(t, n.netns, c...)
		}
		for _, c := range [][]string{
			{"ip", "addr", "add", "192.0.2.1/24", "dev", "out0"},
			{"ip", "addr", "add", "2001:db8:83::1/64", "dev", "out0", "nodad"},
			{"ip", "link", "set", "out0", "up"},
			{"ip", "link", "set", "lo", "up"},
			{"ethtool", "-K", "out0", "gro", "on"},
		} {
			runIn(t, *out, c...)
		}
		if routes {
			runIn(t, *out, "ip", "route", "add", "10.83.0.0/24", "via", "192.0.2.2")
			runIn(t, *out, "ip", "-6", "route", "add", "fd00:83::/64", "via", "2001:db8:83::2")
		}
		n.flags = append(n.flags, "--uplink", "up0")
	}
}

func TestUplink(t *testing.T) {
	for _, mode := range []string{"kernel", "tc", "xdp", "xdp-generic"} {
		t.Run(mode, func(t *testing.T) {
			var out string
			n := newNode(t, withOutside(&out, "1500"))
			// The outside routes the container subnets back: no NAT, and
			// it opens flows to the container (--allow-unsolicited).
			n.mustXlane(nil, "network", "create", "up", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--mode", mode, "--masquerade=false", "--allow-unsolicited")
			c := newNetns(t, "c")
			var ep api.EndpointInfo
			n.mustXlane(&ep, "endpoint", "add", "up", "--netns", c)
			o4, o6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:83::1")

			ping(t, c, o4)
			ping(t, c, o6)
			ping(t, out, ep.IPs[0])
			ping(t, out, ep.IPs[1])
			transfer(t, c, out, o4, bulk)
			transfer(t, c, out, o6, bulk/2)
			transfer(t, out, c, ep.IPs[0], bulk)
			transfer(t, out, c, ep.IPs[1], bulk/2)

			var got api.EndpointInfo
			n.mustXlane(&got, "endpoint", "inspect", ep.ID)
			noDrops(t, got)
			switch mode {
			case "xdp":
				if c := reason(got, "fwd_fib", "from_endpoint"); c.Packets < 1000 {
					t.Errorf("container->outside fwd_fib = %d packets, want the transfer on the XDP fast path; %+v", c.Packets, got.Reasons)
				}
				if c := reason(got, "fwd_peer", "to_endpoint"); c.Packets < 1000 {
					t.Errorf("outside->container fwd_peer = %d packets, want the transfer through the uplink program; %+v", c.Packets, got.Reasons)
				}
			case "tc":
				if c := reason(got, "fwd_fib", "from_endpoint").Packets + reason(got, "fwd_neigh", "from_endpoint").Packets; c < 1000 {
					t.Errorf("container->outside fwd_fib+fwd_neigh = %d packets, want the transfer on the fast path; %+v", c, got.Reasons)
				}
			}
		})
	}
}

// A path MTU smaller than the container's: the "fragmentation needed" /
// "packet too big" error must reach the sender through every datapath.
func TestUplinkPMTU(t *testing.T) {
	for _, mode := range []string{"kernel", "tc", "xdp", "xdp-generic"} {
		t.Run(mode, func(t *testing.T) {
			var out string
			n := newNode(t, withOutside(&out, "1280"))
			n.mustXlane(nil, "network", "create", "up", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--mode", mode)
			c := newNetns(t, "c")
			n.mustXlane(nil, "endpoint", "add", "up", "--netns", c)
			for _, tc := range []struct{ dst, want string }{
				{"192.0.2.1", "mtu = 1280"},
				{"2001:db8:83::1", "mtu=1280"},
			} {
				o, _ := inNS(c, "ping", "-M", "do", "-s", "1400", "-c", "2", "-i", "0.3", "-W", "1", tc.dst).CombinedOutput()
				if !strings.Contains(string(o), tc.want) {
					t.Errorf("ping -M do -s 1400 %s: want an ICMP error naming %q, got:\n%s", tc.dst, tc.want, o)
				}
			}
			// And TCP adapts to the smaller path.
			transfer(t, c, out, netip.MustParseAddr("192.0.2.1"), bulk/4)
			transfer(t, c, out, netip.MustParseAddr("2001:db8:83::1"), bulk/4)
		})
	}
}
