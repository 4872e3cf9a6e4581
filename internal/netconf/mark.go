package netconf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/model"
)

// What a network puts in the kernel before its record is stored (its
// gateway addresses on lo and its unreachable routes, EnsureNetwork)
// carries xlane's mark, so that a crash between the two leaves objects the
// next start can recognise and remove (PruneNetworks), and --uninstall
// too: routes have their protocol (rtm_protocol) set to Proto, addresses
// their IFA_PROTO (Linux 6.0+; an older kernel ignores the attribute and
// such an address is never swept). Nothing without the mark is ever
// removed by the sweep: the node's own routes and addresses have the
// kernel's, boot's, static's or a routing daemon's protocol, 0 for
// addresses.
//
// 0x58 ('X') is unassigned in the kernel's rtnetlink.h and iproute2's
// rt_protos; `ip route` shows it as "proto 88".
const Proto = 0x58

// ifaProto is IFA_PROTO of linux/if_addr.h (x/sys/unix lacks it).
const ifaProto = 11

// addrReplaceMarked adds (or replaces) a on link with xlane's IFA_PROTO:
// the request netlink.AddrReplace sends, plus the attribute.
func addrReplaceMarked(link netlink.Link, a *netlink.Addr) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	family := nl.FAMILY_V4
	ip := a.IP.To4()
	if ip == nil {
		family, ip = nl.FAMILY_V6, a.IP.To16()
	}
	msg := nl.NewIfAddrmsg(family)
	msg.Index = uint32(link.Attrs().Index)
	bits, _ := a.Mask.Size()
	msg.Prefixlen = uint8(bits)
	msg.IfAddrmsg.Flags = uint8(a.Flags)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, ip))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, ip))
	if a.Label != "" {
		req.AddData(nl.NewRtAttr(unix.IFA_LABEL, nl.ZeroTerminated(a.Label)))
	}
	req.AddData(nl.NewRtAttr(ifaProto, []byte{Proto}))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// markedAddrs lists the addresses on lo (ifindex) that carry xlane's mark.
func markedAddrs(lo int) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, family := range []int{nl.FAMILY_V4, nl.FAMILY_V6} {
		msgs, err := retryDump(func() ([][]byte, error) {
			req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
			req.AddData(nl.NewIfAddrmsg(family))
			return req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWADDR)
		})
		if errors.Is(err, unix.EAFNOSUPPORT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list addresses: %w", err)
		}
		for _, m := range msgs {
			msg := nl.DeserializeIfAddrmsg(m)
			if int(msg.Index) != lo {
				continue
			}
			attrs, err := nl.ParseRouteAttr(m[msg.Len():])
			if err != nil {
				return nil, fmt.Errorf("parse address: %w", err)
			}
			var addr netip.Addr
			marked := false
			for _, at := range attrs {
				switch at.Attr.Type {
				case unix.IFA_LOCAL, unix.IFA_ADDRESS:
					if a, ok := netip.AddrFromSlice(at.Value); ok {
						addr = a
					}
				case ifaProto:
					marked = len(at.Value) == 1 && at.Value[0] == Proto
				}
			}
			if marked && addr.IsValid() {
				out = append(out, netip.PrefixFrom(addr, int(msg.Prefixlen)))
			}
		}
	}
	return out, nil
}

// markedRoutes lists the main table's unreachable routes with xlane's
// protocol.
func markedRoutes() ([]netlink.Route, error) {
	var out []netlink.Route
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		filter := &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: Proto}
		routes, err := retryDump(func() ([]netlink.Route, error) {
			return netlink.RouteListFiltered(family, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		})
		if errors.Is(err, unix.EAFNOSUPPORT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if r.Type == unix.RTN_UNREACHABLE && r.Protocol == Proto {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// PruneNetworks removes the marked gateway addresses and unreachable
// routes that belong to no network in nets (left by a crash between
// EnsureNetwork and the store record; nil: all of them, for --uninstall).
func PruneNetworks(nets []model.Network) error {
	keepAddr, keepRoute := map[netip.Addr]bool{}, map[netip.Prefix]bool{}
	for _, n := range nets {
		for _, gw := range n.Gateways {
			keepAddr[gw] = true
		}
		for _, p := range n.Subnets {
			keepRoute[p.Masked()] = true
		}
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	var errs []error
	addrs, err := markedAddrs(lo.Attrs().Index)
	errs = append(errs, err)
	for _, a := range addrs {
		if keepAddr[a.Addr()] {
			continue
		}
		err := netlink.AddrDel(lo, &netlink.Addr{IPNet: ipnet(a)})
		if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete stale gateway %s from lo: %w", a, err))
		}
	}
	routes, err := markedRoutes()
	errs = append(errs, err)
	for i := range routes {
		r := &routes[i]
		if p, ok := routePrefix(r.Dst, r.Family); ok && keepRoute[p] {
			continue
		}
		if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete stale unreachable route %s: %w", r.Dst, err))
		}
	}
	return errors.Join(errs...)
}
