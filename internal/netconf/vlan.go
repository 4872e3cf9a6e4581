package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/model"
)

// VLANDevPrefix and VLANPortPrefix name the two ends of a VLAN network's
// port (bpf/lib/vlan.h): xlvl<VID> is the node's L3 device on the VLAN,
// xlvp<VID> the end where the tc programs push the tag. A veth pair, not
// an 802.1Q device: the tag is BPF's, so kernels without 802.1Q support
// (CONFIG_VLAN_8021Q off) carry VLANs too.
const (
	VLANDevPrefix  = "xlvl"
	VLANPortPrefix = "xlvp"
)

// VLANNames are the names of VLAN vid's port ends.
func VLANNames(vid uint16) (dev, port string) {
	return fmt.Sprintf("%s%d", VLANDevPrefix, vid), fmt.Sprintf("%s%d", VLANPortPrefix, vid)
}

// EnsureVLAN creates (or adopts) network n's VLAN port with the uplink's
// MTU and puts the network's subnets on the VLAN: a route per subnet
// through the device (the VLAN's hosts are on-link; the endpoints' /32
// and /128 routes stay more specific), proxy ARP for the endpoints'
// addresses, fe80::1 as the VLAN hosts' IPv6 router (as on every host
// veth). It returns both ends.
func EnsureVLAN(n *model.Network, mtu int) (dev, port netlink.Link, err error) {
	devName, portName := VLANNames(n.VLAN)
	dev, err = netlink.LinkByName(devName)
	if err != nil && !isNotFound(err) {
		return nil, nil, fmt.Errorf("look up %s: %w", devName, err)
	}
	if err != nil {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: devName, MTU: mtu}, PeerName: portName}
		if err := netlink.LinkAdd(v); err != nil {
			return nil, nil, fmt.Errorf("create vlan %d port %s: %w", n.VLAN, devName, err)
		}
		if dev, err = netlink.LinkByName(devName); err != nil {
			return nil, nil, fmt.Errorf("look up %s: %w", devName, err)
		}
	}
	if port, err = netlink.LinkByName(portName); err != nil {
		return nil, nil, fmt.Errorf("look up %s: %w", portName, err)
	}
	for _, l := range []netlink.Link{dev, port} {
		if l.Attrs().MTU != mtu {
			if err := netlink.LinkSetMTU(l, mtu); err != nil {
				return nil, nil, fmt.Errorf("set %s mtu %d: %w", l.Attrs().Name, mtu, err)
			}
		}
	}
	// The port has no addresses of its own: nothing of its own to send.
	sysctl("net/ipv6/conf/"+portName+"/disable_ipv6", "1")
	for _, s := range []struct{ path, val string }{
		{"net/ipv4/conf/" + devName + "/forwarding", "1"},
		{"net/ipv4/conf/" + devName + "/proxy_arp", "1"},
		{"net/ipv4/conf/" + devName + "/rp_filter", "0"},
		// Proxy answers at once (the default delays them up to 0.8 s).
		{"net/ipv4/neigh/" + devName + "/proxy_delay", "0"},
	} {
		if err := sysctl(s.path, s.val); err != nil {
			return nil, nil, err
		}
	}
	if _, _, ok := n.Subnet6(); ok {
		for _, s := range []string{"conf/" + devName + "/forwarding", "conf/" + devName + "/proxy_ndp"} {
			if err := sysctl("net/ipv6/"+s, "1"); err != nil {
				return nil, nil, err
			}
		}
		if err := sysctl("net/ipv6/neigh/"+devName+"/proxy_delay", "0"); err != nil {
			return nil, nil, err
		}
		ll := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrReplace(dev, ll); err != nil {
			return nil, nil, fmt.Errorf("add fe80::1 to %s: %w", devName, err)
		}
	}
	for _, l := range []netlink.Link{port, dev} {
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, nil, fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
		}
	}
	for i, p := range n.Subnets {
		r := &netlink.Route{Dst: ipnet(p), LinkIndex: dev.Attrs().Index, Scope: netlink.SCOPE_LINK, Src: n.Gateways[i].AsSlice()}
		if err := netlink.RouteReplace(r); err != nil {
			return nil, nil, fmt.Errorf("route %s to vlan %d: %w", p, n.VLAN, err)
		}
	}
	return dev, port, nil
}

// DeleteVLAN removes network n's VLAN port (its routes and proxy entries
// go with it); missing is fine.
func DeleteVLAN(n *model.Network) error {
	devName, _ := VLANNames(n.VLAN)
	return DeleteLink(devName)
}

// DeleteLink deletes the device name (a pair's other end goes with it);
// missing is fine.
func DeleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// VLANPorts lists the VLAN ports' devices (xlvl*) on the node.
func VLANPorts() ([]string, error) {
	links, err := retryDump(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []string
	for _, l := range links {
		if name := l.Attrs().Name; strings.HasPrefix(name, VLANDevPrefix) {
			out = append(out, name)
		}
	}
	return out, nil
}

// SetVLANProxy answers neighbour discovery on VLAN vid for an endpoint's
// IPv6 addresses (proxy ARP needs no entries: proxy_arp answers for any
// address routed through another device). on false removes the entries;
// missing ones are fine. Without the port (a start re-applying endpoints
// before their networks' VLANs) nothing is done: the daemon's VLAN setup
// adds them with the port.
func SetVLANProxy(vid uint16, addrs []netip.Addr, on bool) error {
	devName, _ := VLANNames(vid)
	dev, err := netlink.LinkByName(devName)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", devName, err)
	}
	for _, a := range addrs {
		if !a.Is6() {
			continue
		}
		nb := &netlink.Neigh{LinkIndex: dev.Attrs().Index, Family: netlink.FAMILY_V6, Flags: netlink.NTF_PROXY, IP: a.AsSlice()}
		if on {
			err = netlink.NeighSet(nb)
		} else if err = netlink.NeighDel(nb); errors.Is(err, unix.ENOENT) {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("proxy neighbour %s on %s: %w", a, devName, err)
		}
	}
	return nil
}
