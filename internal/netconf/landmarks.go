package netconf

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Landmark is an address the node's own traffic depends on, and what it
// is ("the node's address 192.0.2.2 (dev eth0)").
type Landmark struct {
	Addr netip.Addr
	What string
}

// NodeLandmarks lists, in the namespace of the calling thread, the node's
// own addresses and the gateways of its default routes: sources a
// blocklist on the uplink must not cover. Addresses on lo are left out
// (networks' gateways and the like: nothing arrives from them on a device,
// and blocking a network's subnet on the uplink is anti-spoofing, not a
// cut-off).
func NodeLandmarks() ([]Landmark, error) {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	var out []Landmark
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.Unmap().IsLoopback() || onLoopback(a.LinkIndex) {
			continue
		}
		out = append(out, Landmark{ip.Unmap(), fmt.Sprintf("the node's address %s (%s)", ip.Unmap(), linkName(a.LinkIndex))})
	}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("list the node's routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue // not a default route
			}
		}
		gws := []*netlink.NexthopInfo{{LinkIndex: r.LinkIndex, Gw: r.Gw}}
		if len(r.MultiPath) > 0 {
			gws = r.MultiPath
		}
		for _, nh := range gws {
			if gw, ok := netip.AddrFromSlice(nh.Gw); ok {
				out = append(out, Landmark{gw.Unmap(), fmt.Sprintf("the node's default gateway %s (%s)", gw.Unmap(), linkName(nh.LinkIndex))})
			}
		}
	}
	return out, nil
}

func onLoopback(ifindex int) bool {
	l, err := netlink.LinkByIndex(ifindex)
	return err == nil && l.Attrs().Flags&net.FlagLoopback != 0
}
