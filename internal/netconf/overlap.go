package netconf

import (
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/model"
)

// Shortest subnets a network may take. A network's unreachable route covers
// its whole subnet: anything shorter than these would shadow most of the
// node's reachable space (0.0.0.0/1 and 128.0.0.0/1 together are a default
// route), and no container network needs that many addresses.
const (
	MinSubnetBits4 = 8
	MinSubnetBits6 = 16
)

// CheckSubnetFree refuses a network subnet that collides with the node
// itself, in the namespace of the calling thread (the one xlaned manages):
//   - a prefix shorter than MinSubnetBits4/6 (0.0.0.0/0, ::/0 and the like);
//   - a subnet holding one of the node's addresses (the gateway would go
//     onto lo beside it, and `network rm` would take it away);
//   - a subnet equal to or containing a route of the main table (the
//     network's unreachable route would replace or shadow it);
//   - a subnet inside an on-link route (no gateway), such as the uplink's
//     connected prefix: its endpoints would be addressed as neighbours of
//     the uplink.
//
// Routes through a gateway that merely contain the subnet (the default
// route, a VPN's 10.0.0.0/8) are fine: the network's more specific route
// wins for its own addresses only. xlane's own routes are not exempt: the
// store's overlap check between networks runs first and says it better.
// own are addresses xlane itself gives the node inside its pod CIDRs (the
// cluster address on the WireGuard device), which no endpoint gets.
func CheckSubnetFree(p netip.Prefix, own ...netip.Addr) error {
	if p.Addr().Is4() && p.Bits() < MinSubnetBits4 || p.Addr().Is6() && p.Bits() < MinSubnetBits6 {
		return model.Fieldf("subnets", "%s: shorter than /%d (IPv4) or /%d (IPv6): it would cover the node's own routes", p, MinSubnetBits4, MinSubnetBits6)
	}
	family := netlink.FAMILY_V4
	if p.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, family) })
	if err != nil {
		return err
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if p.Contains(ip.Unmap()) && !slices.Contains(own, ip.Unmap()) {
			return model.Fieldf("subnets", "%s: holds the node's address %s (%s)", p, ip.Unmap(), linkName(a.LinkIndex))
		}
	}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return err
	}
	for _, r := range routes {
		dst, ok := routePrefix(r.Dst, family)
		if !ok {
			continue
		}
		switch {
		case p.Bits() <= dst.Bits() && p.Contains(dst.Addr()):
			return model.Fieldf("subnets", "%s: covers the node's route %s (%s)", p, dst, linkName(r.LinkIndex))
		case onLink(r) && dst.Contains(p.Addr()):
			return model.Fieldf("subnets", "%s: inside the node's on-link prefix %s (%s)", p, dst, linkName(r.LinkIndex))
		}
	}
	return nil
}

// onLink reports whether r is a connected route: unicast straight out of a
// device, no gateway. (IPv6 routes carry no link scope, so the scope says
// nothing there.)
func onLink(r netlink.Route) bool {
	return r.Type == unix.RTN_UNICAST && r.Gw == nil && r.Via == nil && len(r.MultiPath) == 0 && r.LinkIndex > 0
}

// routePrefix is a route's destination as a prefix; a nil Dst is the
// default route.
func routePrefix(dst *net.IPNet, family int) (netip.Prefix, bool) {
	if dst == nil {
		if family == netlink.FAMILY_V4 {
			return netip.MustParsePrefix("0.0.0.0/0"), true
		}
		return netip.MustParsePrefix("::/0"), true
	}
	a, ok := netip.AddrFromSlice(dst.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

func linkName(ifindex int) string {
	if l, err := netlink.LinkByIndex(ifindex); err == nil {
		return "dev " + l.Attrs().Name
	}
	return "no device"
}

// BroadcastOf names the device whose IPv4 subnet has a as its broadcast
// address (the address's IFA_BROADCAST, or the last address of its
// prefix), in the namespace of the calling thread; "" for none.
func BroadcastOf(a netip.Addr) string {
	if !a.Is4() {
		return ""
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return ""
	}
	for _, ad := range addrs {
		if b, ok := netip.AddrFromSlice(ad.Broadcast); ok && b.Unmap() == a {
			return linkName(ad.LinkIndex)
		}
		ip, ok := netip.AddrFromSlice(ad.IP)
		if ones, _ := ad.Mask.Size(); ok && ones < 31 && model.BroadcastAddr(netip.PrefixFrom(ip.Unmap(), ones)) == a {
			return linkName(ad.LinkIndex)
		}
	}
	return ""
}
