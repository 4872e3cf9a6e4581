package netconf

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// SetPeerMAC gives the container side of a veth the MAC address a runtime
// asked for (Docker's --mac-address), while it is still in the node's
// namespace, and records it in e.MAC.
func SetPeerMAC(e *model.Endpoint, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("endpoint %s mac %q: %w", e.ID, mac, err)
	}
	peer, err := netlink.LinkByName(e.PeerIf)
	if err != nil {
		return fmt.Errorf("find veth peer %s: %w", e.PeerIf, err)
	}
	if err := netlink.LinkSetHardwareAddr(peer, hw); err != nil {
		return fmt.Errorf("set mac %s on %s: %w", hw, e.PeerIf, err)
	}
	e.MAC = hw.String()
	return nil
}

// ConfigureOnLink prepares the host side of a veth-only endpoint for a
// runtime that configures the network's subnet on-link in the container
// (Docker does) instead of xlane's routed setup:
//   - the node's routes to the endpoint carry the gateway as source;
//   - proxy ARP (set by ConfigureHost) answers at once rather than after
//     a random delay of up to proxy_delay (0.8 s by default);
//   - IPv6: the host veth answers neighbour discovery for the network's
//     gateway, which lives on lo (Linux answers ND only for addresses of the
//     receiving interface, and proxies it only per address and interface).
//     The runtime reaches the other endpoints through that gateway (see the
//     Docker driver's static routes), not by ND.
func ConfigureOnLink(e *model.Endpoint, n *model.Network, host netlink.Link) error {
	name := host.Attrs().Name
	if err := sysctl("net/ipv4/neigh/"+name+"/proxy_delay", "0"); err != nil {
		return err
	}
	// The node talks to the endpoint from the network's gateway address,
	// which the container has on-link (as it would be on a bridge). Another
	// source may be unreachable for the container: on an internal network
	// it has no route but its subnet.
	for _, a := range e.IPs {
		gw := n.Gateways[0]
		for i, p := range n.Subnets {
			if p.Contains(a) {
				gw = n.Gateways[i]
			}
		}
		r := &netlink.Route{LinkIndex: host.Attrs().Index, Dst: prefixOf(a), Scope: netlink.SCOPE_LINK, Src: gw.AsSlice()}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("set source %s on route %s dev %s: %w", gw, a, name, err)
		}
	}
	_, gw6, ok := n.Subnet6()
	if !ok || !hasFamily(e.IPs, false) {
		return nil
	}
	if err := sysctl("net/ipv6/conf/"+name+"/proxy_ndp", "1"); err != nil {
		return err
	}
	if err := sysctl("net/ipv6/neigh/"+name+"/proxy_delay", "0"); err != nil {
		return err
	}
	proxy := &netlink.Neigh{
		LinkIndex: host.Attrs().Index, Family: netlink.FAMILY_V6,
		Flags: netlink.NTF_PROXY, IP: gw6.AsSlice(),
	}
	if err := netlink.NeighSet(proxy); err != nil {
		return fmt.Errorf("proxy neighbour discovery for %s on %s: %w", gw6, name, err)
	}
	return nil
}
