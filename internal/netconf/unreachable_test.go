package netconf

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/model"
)

// Even past validation, xlane neither replaces nor deletes a route it did
// not make: a node route at a network's subnet makes EnsureNetwork fail
// and survives both it and DeleteNetwork; xlane's own unreachable route is
// re-applied idempotently and deleted.
func TestUnreachableRouteLeavesNodeRoutes(t *testing.T) {
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	err = node.Do(func(ns.NetNS) error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up0p"}
		if err := netlink.LinkAdd(v); err != nil {
			return err
		}
		up, _ := netlink.LinkByName("up0")
		if err := netlink.LinkSetUp(up); err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("10.70.0.0/24")
		nodeRoute := &netlink.Route{LinkIndex: up.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteAdd(nodeRoute); err != nil {
			return err
		}
		n := &model.Network{Device: "xlnet1", Subnets: []netip.Prefix{netip.MustParsePrefix("10.70.0.0/24")},
			Gateways: []netip.Addr{netip.MustParseAddr("10.70.0.1")}}
		if err := EnsureNetwork(n); !errors.Is(err, ErrRouteTaken) {
			t.Errorf("EnsureNetwork over the node's route 10.70.0.0/24 = %v, want ErrRouteTaken", err)
		}
		if err := DeleteNetwork(n); err != nil {
			t.Errorf("DeleteNetwork: %v", err)
		}
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, nodeRoute, netlink.RT_FILTER_DST)
		if err != nil {
			return err
		}
		if len(rs) != 1 || rs[0].Type != unix.RTN_UNICAST || rs[0].LinkIndex != up.Attrs().Index {
			t.Errorf("node route 10.70.0.0/24 dev up0 after EnsureNetwork+DeleteNetwork: %+v", rs)
		}

		own := &model.Network{Device: "xlnet2", Subnets: []netip.Prefix{netip.MustParsePrefix("10.71.0.0/24")},
			Gateways: []netip.Addr{netip.MustParseAddr("10.71.0.1")}}
		for i := 0; i < 2; i++ { // a restart re-applies the store
			if err := EnsureNetwork(own); err != nil {
				t.Fatalf("EnsureNetwork #%d: %v", i+1, err)
			}
		}
		if _, ok, _ := findUnreachable(own.Subnets[0]); !ok {
			t.Errorf("no unreachable route 10.71.0.0/24 after EnsureNetwork")
		}
		if err := DeleteNetwork(own); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := findUnreachable(own.Subnets[0]); ok {
			t.Errorf("unreachable route 10.71.0.0/24 left after DeleteNetwork")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
