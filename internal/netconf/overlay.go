package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes xlaned makes to peers' pod CIDRs
// (`ip route show proto 120`), so reconcile finds exactly its own.
const RouteProtocol = 120

// OverlayMAC is every xlane VXLAN device's MAC (XL_OVERLAY_MAC in
// bpf/lib/overlay.h): the inner frames a node tunnels are addressed to it.
var OverlayMAC = net.HardwareAddr{0x02, 0x78, 0x6c, 0x76, 0x78, 0x00}

// VXLAN overhead on top of the inner packet's L3 MTU: outer IP + UDP +
// VXLAN + inner Ethernet.
const (
	VXLANOverhead4 = 20 + 8 + 8 + 14
	VXLANOverhead6 = 40 + 8 + 8 + 14
)

// EnsureOverlay creates (or adopts) the collect_md VXLAN device: external
// (the BPF programs set each packet's tunnel key), no learning, no ARP
// (routes to peers' pod CIDRs resolve to its own MAC), up, with mtu.
// One device serves IPv4 and IPv6 underlays: the kernel allows one
// collect_md device per UDP port and namespace and opens both families.
// It accepts IPv6 UDP with a zero checksum (udp6zerocsumrx): what a node
// encapsulating in BPF sends (bpf/lib/overlay_encap.h); it still sends
// checksummed IPv6 UDP itself.
func EnsureOverlay(name string, port, mtu int) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err == nil {
		if vx, ok := l.(*netlink.Vxlan); !ok || !vx.FlowBased || vx.Port != port || !vx.UDP6ZeroCSumRx {
			if err := netlink.LinkDel(l); err != nil {
				return nil, fmt.Errorf("replace %s: %w", name, err)
			}
			l = nil
		}
	} else if !isNotFound(err) {
		return nil, fmt.Errorf("look up %s: %w", name, err)
	} else {
		l = nil
	}
	if l == nil {
		vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu, HardwareAddr: OverlayMAC},
			FlowBased: true, Port: port, Learning: false, UDP6ZeroCSumRx: true}
		if err := netlink.LinkAdd(vx); err != nil {
			return nil, fmt.Errorf("create vxlan device %s (port %d): %w", name, port, err)
		}
		if l, err = netlink.LinkByName(name); err != nil {
			return nil, fmt.Errorf("look up %s: %w", name, err)
		}
	}
	if l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return nil, fmt.Errorf("set %s mtu %d: %w", name, mtu, err)
		}
	}
	if err := netlink.LinkSetHardwareAddr(l, OverlayMAC); err != nil {
		return nil, fmt.Errorf("set %s address: %w", name, err)
	}
	if err := netlink.LinkSetARPOff(l); err != nil {
		return nil, fmt.Errorf("set %s noarp: %w", name, err)
	}
	// Forwarding in and out of it, as on the host veths.
	sysctl("net/ipv4/conf/"+name+"/forwarding", "1")
	sysctl("net/ipv4/conf/"+name+"/rp_filter", "0")
	if err := netlink.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("set %s up: %w", name, err)
	}
	return l, nil
}

// DeleteOverlay removes the VXLAN device; missing is fine.
func DeleteOverlay(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// UnderlayLink is the device holding addr (nil if none does).
func UnderlayLink(addr netip.Addr) netlink.Link {
	links, err := netlink.LinkList()
	if err != nil {
		return nil
	}
	for _, l := range links {
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
				return l
			}
		}
	}
	return nil
}

// IsLocalAddr says whether addr is one of the node's addresses.
func IsLocalAddr(addr netip.Addr) bool { return UnderlayLink(addr) != nil }

// EnableForwarding lets Linux forward IPv4 packets that arrive on dev
// (the uplink: what its programs pass to Linux for an endpoint; native
// routing: peers' pods' packets come in by the underlay device). IPv6
// forwarding is the node's (set with its first IPv6 network).
func EnableForwarding(dev string) error {
	return sysctl(Forwarding4(dev), "1")
}

// EnsurePeerRoute routes a peer's pod CIDR: through the VXLAN device
// (overlayIfindex, via invalid) or natively via its underlay address.
func EnsurePeerRoute(p netip.Prefix, overlayIfindex int, via netip.Addr) error {
	r := &netlink.Route{Dst: ipnet(p), Protocol: RouteProtocol}
	if via.IsValid() {
		r.Gw = via.AsSlice()
	} else {
		r.LinkIndex, r.Scope = overlayIfindex, netlink.SCOPE_LINK
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("route %s: %w", p, err)
	}
	return nil
}

// DeletePeerRoute removes xlane's route to p; missing is fine.
func DeletePeerRoute(p netip.Prefix) error {
	// Scope "nowhere" matches any scope (IPv4 matches the scope exactly
	// otherwise: the overlay's routes are scope link).
	r := &netlink.Route{Dst: ipnet(p), Protocol: RouteProtocol, Scope: netlink.SCOPE_NOWHERE}
	if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete route %s: %w", p, err)
	}
	return nil
}

// PeerRoutes lists the destinations of xlane's peer routes.
func PeerRoutes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := retryDump(func() ([]netlink.Route, error) {
			return netlink.RouteListFiltered(fam, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		})
		if err != nil {
			return nil, fmt.Errorf("list peer routes: %w", err)
		}
		for _, r := range rs {
			if r.Dst == nil {
				continue
			}
			a, _ := netip.AddrFromSlice(r.Dst.IP)
			bits, _ := r.Dst.Mask.Size()
			out = append(out, netip.PrefixFrom(a.Unmap(), bits))
		}
	}
	return out, nil
}
