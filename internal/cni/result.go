package cni

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
)

// result is ADD's answer: the previous plugin's result (chained) or a new
// one, with the endpoint's host device and the container's interface, its
// addresses (as configured in the namespace: prefix length, and the
// gateway of their family) and the routes through it.
func result(c *Conf, args *skel.CmdArgs, ep *api.EndpointInfo) (*current.Result, error) {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: c.DNS}
	if c.PrevResult != nil {
		prev, err := current.NewResultFromResult(c.PrevResult)
		if err != nil {
			return nil, fmt.Errorf("prevResult: %w", err)
		}
		res = prev
		if len(res.DNS.Nameservers) == 0 && len(res.DNS.Search) == 0 {
			res.DNS = c.DNS
		}
	}
	seen, err := inspect(args.Netns, args.IfName)
	if err != nil {
		return nil, err
	}
	res.Interfaces = append(res.Interfaces,
		&current.Interface{Name: ep.HostIf, Mac: ep.HostMAC},
		&current.Interface{Name: args.IfName, Mac: seen.mac, Mtu: seen.mtu, Sandbox: args.Netns})
	idx := len(res.Interfaces) - 1
	for _, a := range ep.IPs {
		ipn, ok := seen.addrs[a]
		if !ok {
			return nil, fmt.Errorf("address %s of endpoint %s is not on %s in %s", a, ep.ID, args.IfName, args.Netns)
		}
		ip := &current.IPConfig{Interface: current.Int(idx), Address: ipn}
		if gw, ok := seen.gateways[a.Is4()]; ok {
			ip.Gateway = gw
		}
		res.IPs = append(res.IPs, ip)
	}
	res.Routes = append(res.Routes, seen.routes...)
	return res, nil
}

// inNetns is what the container's interface has.
type inNetns struct {
	mac      string
	mtu      int
	addrs    map[netip.Addr]net.IPNet
	gateways map[bool]net.IP // by "is IPv4"
	routes   []*types.Route
}

// inspect reads the container interface's addresses and routes in its
// namespace: the routes xlane installed (not the kernel's own prefix and
// link-local routes).
func inspect(netnsPath, ifname string) (*inNetns, error) {
	out := &inNetns{addrs: map[netip.Addr]net.IPNet{}, gateways: map[bool]net.IP{}}
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		link, err := netlinksafe.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("find %s: %w", ifname, err)
		}
		out.mac, out.mtu = link.Attrs().HardwareAddr.String(), link.Attrs().MTU
		addrs, err := netlinksafe.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("list addresses of %s: %w", ifname, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out.addrs[ip.Unmap()] = *a.IPNet
			}
		}
		routes, err := netlinksafe.RouteList(link, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("list routes of %s: %w", ifname, err)
		}
		for _, r := range routes {
			if r.Protocol == unix.RTPROT_KERNEL || r.Table != unix.RT_TABLE_MAIN {
				continue
			}
			dst := r.Dst
			if dst == nil { // the default route
				bits := 128
				if r.Family == netlink.FAMILY_V4 {
					bits = 32
				}
				dst = &net.IPNet{IP: make(net.IP, bits/8), Mask: net.CIDRMask(0, bits)}
			}
			out.routes = append(out.routes, &types.Route{Dst: *dst, GW: r.Gw})
			if r.Gw != nil {
				out.gateways[r.Gw.To4() != nil] = r.Gw
			}
		}
		return nil
	})
	return out, err
}

// check compares the namespace with what prev says of the interface: every
// address and route listed for it is there, and the addresses are the
// endpoint's.
func check(args *skel.CmdArgs, ep *api.EndpointInfo, prev *current.Result) error {
	idx := slices.IndexFunc(prev.Interfaces, func(i *current.Interface) bool {
		return i.Name == args.IfName && i.Sandbox != ""
	})
	if idx < 0 {
		return fmt.Errorf("prevResult has no interface %s in a sandbox", args.IfName)
	}
	seen, err := inspect(args.Netns, args.IfName)
	if err != nil {
		return err
	}
	if want := prev.Interfaces[idx].Mac; want != "" && want != seen.mac {
		return fmt.Errorf("%s has MAC %s, prevResult says %s", args.IfName, seen.mac, want)
	}
	var listed []netip.Addr
	for _, ip := range prev.IPs {
		if ip.Interface == nil || *ip.Interface != idx {
			continue
		}
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		a = a.Unmap()
		listed = append(listed, a)
		got, ok := seen.addrs[a]
		if !ok {
			return fmt.Errorf("address %s is not on %s", ip.Address.String(), args.IfName)
		}
		if got.String() != ip.Address.String() {
			return fmt.Errorf("%s has %s, prevResult says %s", args.IfName, got.String(), ip.Address.String())
		}
	}
	for _, a := range ep.IPs {
		if !slices.Contains(listed, a) {
			return fmt.Errorf("endpoint %s has address %s, which prevResult does not list for %s", ep.ID, a, args.IfName)
		}
	}
	for _, r := range prev.Routes {
		// Routes carry no interface: those through this one's gateways
		// are its (a chained result may list others').
		if r.GW == nil || !slices.ContainsFunc(gateways(seen), r.GW.Equal) {
			continue
		}
		if !slices.ContainsFunc(seen.routes, func(s *types.Route) bool {
			return s.Dst.String() == r.Dst.String() && s.GW.Equal(r.GW)
		}) {
			return fmt.Errorf("route %s via %v is not in %s", r.Dst.String(), r.GW, args.Netns)
		}
	}
	return nil
}

func gateways(s *inNetns) []net.IP {
	var out []net.IP
	for _, gw := range s.gateways {
		out = append(out, gw)
	}
	return out
}
