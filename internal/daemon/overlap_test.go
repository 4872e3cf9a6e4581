package daemon

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// nodeUplink gives the test node an uplink like a real one: a veth with
// 198.51.100.1/24 and fd00:99::1/64 on-link, default routes through
// .254 and ::fe, and a VPN-like 10.0.0.0/8 plus 10.99.0.0/24 via the router.
func nodeUplink(t *testing.T) {
	t.Helper()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up0p"}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatal(err)
	}
	up, _ := netlink.LinkByName("up0")
	peer, _ := netlink.LinkByName("up0p")
	lo, _ := netlink.LinkByName("lo") // as xlane leaves it
	for _, l := range []netlink.Link{up, peer, lo} {
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []string{"198.51.100.1/24", "fd00:99::1/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = 0x80 // IFA_F_NODAD: usable at once
		if err := netlink.AddrAdd(up, addr); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []struct{ dst, gw string }{
		{"0.0.0.0/0", "198.51.100.254"}, {"::/0", "fd00:99::fe"},
		{"10.0.0.0/8", "198.51.100.254"}, {"10.99.0.0/24", "198.51.100.254"},
	} {
		_, dst, _ := net.ParseCIDR(r.dst)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Dst: dst, Gw: net.ParseIP(r.gw)}); err != nil {
			t.Fatalf("route %s via %s: %v", r.dst, r.gw, err)
		}
	}
}

func routeTable(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteList(nil, fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast() {
				continue // the kernel's, appearing as links come up
			}
			out = append(out, fmt.Sprintf("%v type %d via %v dev %d", r.Dst, r.Type, r.Gw, r.LinkIndex))
		}
	}
	addrs, _ := netlink.AddrList(nil, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a.IPNet.String())
	}
	slices.Sort(out)
	return out
}

// A network whose subnet is, holds or sits inside the node's own addresses
// and routes is refused in validation (field "subnets"), before anything is
// applied: its unreachable route would have replaced the node's route, and
// `network rm` would then have deleted it.
func TestNetworkRefusesNodeSubnets(t *testing.T) {
	inNode(t, func(d *Daemon) {
		nodeUplink(t)
		before := routeTable(t)
		for _, s := range []string{
			"0.0.0.0/0", "::/0", "0.0.0.0/1", "128.0.0.0/1", "8000::/1",
			"198.51.100.0/24", "198.51.100.0/25", "198.51.100.128/26", "198.51.0.0/16",
			"fd00:99::/64", "fd00:99::/96", "fd00::/16",
			"10.99.0.0/24", "10.99.0.0/16",
		} {
			_, err := d.CreateNetwork(api.NetworkCreate{Name: "bad", Subnets: []string{s}})
			var fe *model.FieldError
			if !errors.As(err, &fe) || fe.Field != "subnets" {
				t.Errorf("subnet %s: CreateNetwork = %v, want an error naming field subnet", s, err)
				d.DeleteNetwork("bad", true)
			}
			if after := routeTable(t); !slices.Equal(after, before) {
				t.Fatalf("subnet %s changed the node's routes/addresses:\nbefore %v\nafter  %v", s, before, after)
			}
		}
		// Inside a route through a gateway (a VPN's 10/8, the default
		// route) is fine: the network's route is more specific.
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "ok", Subnets: []string{"10.60.0.0/24", "fd00:60::/64"}}); err != nil {
			t.Fatalf("10.60.0.0/24 inside 10.0.0.0/8 via the router: %v", err)
		}
		if err := d.DeleteNetwork("ok", true); err != nil {
			t.Fatal(err)
		}
		if after := routeTable(t); !slices.Equal(after, before) {
			t.Fatalf("create+rm changed the node's routes/addresses:\nbefore %v\nafter  %v", before, after)
		}
	})
}

// A node route that took a network's subnet after the network was made
// (an older xlane let it, or the admin added it) is left alone: the
// restarted daemon still starts, and `network rm` does not delete it.
func TestRestartLeavesNodeRouteAtSubnet(t *testing.T) {
	inNode(t, func(d *Daemon) {
		nodeUplink(t)
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "n", Subnets: []string{"10.61.0.0/24"}}); err != nil {
			t.Fatal(err)
		}
		d.Close()
		_, dst, _ := net.ParseCIDR("10.61.0.0/24")
		if err := netlink.RouteDel(&netlink.Route{Dst: dst, Type: 7 /* RTN_UNREACHABLE */}); err != nil {
			t.Fatal(err)
		}
		up, _ := netlink.LinkByName("up0")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Dst: dst, Gw: net.ParseIP("198.51.100.254")}); err != nil {
			t.Fatal(err)
		}
		d2, err := newDaemon(d.cfg)
		if err != nil {
			t.Fatalf("restart with a node route at a network's subnet: %v", err)
		}
		defer d2.Close()
		if err := d2.DeleteNetwork("n", true); err != nil {
			t.Fatal(err)
		}
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Gw.String() != "198.51.100.254" {
			t.Errorf("after restart + network rm, routes to 10.61.0.0/24 = %+v, want the node's via 198.51.100.254", rs)
		}
	})
}
