package wireguard

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The nodes' own traffic (xlaned --encryption-node, docs/encryption.md
// "Node traffic"): what this node sends to a peer's underlay address goes
// through the WireGuard device too, but for the control traffic that must
// stay clear to bootstrap it.
//
// Each peer's underlay address is one of its allowed IPs, and a route to
// it into the device (with this node's underlay address as the source, so
// the peer sees the node as before) is in a table of its own,
// NodeTable, behind an unreachable one (the embedded engine's device gone
// while xlaned restarts: refused rather than sent in cleartext). Rules of
// their own (protocol RouteProtocol, per family):
//
//	pref 120  ipproto icmp / ipv6-icmp          lookup main  (the peer probes)
//	pref 120  ipproto udp dport <VXLAN port>    lookup main  (the overlay's cleartext fallback)
//	pref 120  ipproto tcp to <A> dport <P>      lookup main  (ClearTCP: the Kubernetes API server)
//	pref 120  ipproto tcp from <A> sport <P>    lookup main  (its answers, on the node that serves it)
//	pref 121  not fwmark NodeMark/NodeMask      lookup 121   (everything else to a peer's underlay address)
//
// WireGuard's own UDP carries NodeMark (the device's fwmark): it skips
// table 121 and leaves by the main table, on the underlay. A peer whose
// traffic falls back to cleartext (no working session, not strict) has
// its routes out of the table: its node traffic takes the main table
// too; strict, they stay (the node's packets wait in WireGuard, never in
// cleartext).

const (
	// NodeTable is the routing table of the routes into the device to
	// the peers' underlay addresses.
	NodeTable = 121
	// NodeMark is the device's fwmark, on WireGuard's own UDP packets,
	// under NodeMask.
	NodeMark = 0x78770000
	NodeMask = 0xffff0000
	// rulePrefClear is the exclusions' rule preference; rulePrefNode
	// the table's (both before the main table's, 32766).
	rulePrefClear = 120
	rulePrefNode  = 121
)

// nodeRules are the rules --encryption-node needs (above).
func (t *Tunnel) nodeRules() []*netlink.Rule {
	var out []*netlink.Rule
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rule := func(pref, table int) *netlink.Rule {
			r := netlink.NewRule()
			r.Family, r.Priority, r.Table, r.Protocol = fam, pref, table, RouteProtocol
			out = append(out, r)
			return r
		}
		icmp := rule(rulePrefClear, unix.RT_TABLE_MAIN)
		icmp.IPProto = unix.IPPROTO_ICMP
		if fam == unix.AF_INET6 {
			icmp.IPProto = unix.IPPROTO_ICMPV6
		}
		if t.cfg.VXLANPort != 0 {
			vx := rule(rulePrefClear, unix.RT_TABLE_MAIN)
			vx.IPProto, vx.Dport = unix.IPPROTO_UDP, netlink.NewRulePortRange(uint16(t.cfg.VXLANPort), uint16(t.cfg.VXLANPort))
		}
		for _, ap := range t.cfg.ClearTCP {
			if ap.Addr().Unmap().Is4() != (fam == unix.AF_INET) {
				continue
			}
			c := rule(rulePrefClear, unix.RT_TABLE_MAIN)
			c.IPProto, c.Dst = unix.IPPROTO_TCP, hostNet(ap.Addr().Unmap())
			c.Dport = netlink.NewRulePortRange(ap.Port(), ap.Port())
			// Its answers too, on the node that serves it.
			r := rule(rulePrefClear, unix.RT_TABLE_MAIN)
			r.IPProto, r.Src = unix.IPPROTO_TCP, hostNet(ap.Addr().Unmap())
			r.Sport = netlink.NewRulePortRange(ap.Port(), ap.Port())
		}
		mask := uint32(NodeMask)
		n := rule(rulePrefNode, NodeTable)
		n.Mark, n.Mask, n.Invert = NodeMark, &mask, true
	}
	return out
}

// ownRules are the rules of protocol RouteProtocol (this package's).
func ownRules() ([]netlink.Rule, error) {
	var out []netlink.Rule
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RuleList(fam)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, fmt.Errorf("list rules: %w", err)
		}
		for _, r := range rs {
			if r.Protocol == RouteProtocol && (r.Priority == rulePrefClear || r.Priority == rulePrefNode) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// setNodeRules installs the rules (node: --encryption-node) or removes
// them (a former run's). Rules already there stay (a restart adopting
// the kernel's device leaves no moment without them); others of ours go.
func (t *Tunnel) setNodeRules(node bool) error {
	have, err := ownRules()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	if node {
		for _, r := range t.nodeRules() {
			want[ruleKey(r)] = true
			if err := netlink.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add rule %s: %w", r, err)
			}
		}
	}
	for i := range have {
		if want[ruleKey(&have[i])] {
			continue
		}
		if err := netlink.RuleDel(&have[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove rule %s: %w", have[i], err)
		}
	}
	return nil
}

// ruleKey is what tells our rules apart (as set by nodeRules and as the
// kernel lists them).
func ruleKey(r *netlink.Rule) string {
	k := fmt.Sprintf("%d/%d/%d/%d/%d/%v", r.Family, r.Priority, r.Table, r.IPProto, r.Mark, r.Invert)
	if r.Dst != nil {
		k += "/" + r.Dst.String()
	}
	if r.Src != nil {
		k += "/from " + r.Src.String()
	}
	if r.Dport != nil {
		k += fmt.Sprintf("/%d", r.Dport.Start)
	}
	if r.Sport != nil {
		k += fmt.Sprintf("/sport %d", r.Sport.Start)
	}
	return k
}

// nodeRoutes are peer p's routes in NodeTable, per underlay address: into
// the device from this node's underlay address of its family, and
// unreachable behind it.
func (t *Tunnel) nodeRoutes(p Peer) []*netlink.Route {
	var out []*netlink.Route
	for _, a := range p.Underlay {
		a = a.Unmap()
		r := &netlink.Route{LinkIndex: t.link.Attrs().Index, Dst: hostNet(a), Protocol: RouteProtocol,
			Scope: netlink.SCOPE_LINK, Table: NodeTable}
		for _, s := range p.SelfUnderlay {
			if s.Unmap().Is4() == a.Is4() {
				r.Src = s.Unmap().AsSlice()
			}
		}
		u := fallbackRoute(a)
		u.Table = NodeTable
		out = append(out, r, u)
	}
	return out
}

// setNodeRoutes puts peer p's node routes in place (in: its traffic goes
// through WireGuard) or takes them out (cleartext fallback, or the peer
// gone). t.mu held.
func (t *Tunnel) setNodeRoutes(p Peer, in bool) error {
	if !t.cfg.Node {
		return nil
	}
	for _, r := range t.nodeRoutes(p) {
		if !in {
			if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("remove node route %s: %w", r.Dst, err)
			}
			continue
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("node route %s into %s: %w", r.Dst, Device, err)
		}
	}
	return nil
}

// nodeTableRoutes are NodeTable's routes.
func nodeTableRoutes() ([]netlink.Route, error) {
	return listRoutes(&netlink.Route{Table: NodeTable}, netlink.RT_FILTER_TABLE, fmt.Sprintf("table %d", NodeTable))
}

// removeNodeTraffic removes the rules and NodeTable's routes.
func removeNodeTraffic() error {
	var errs []error
	rules, err := ownRules()
	errs = append(errs, err)
	for i := range rules {
		if err := netlink.RuleDel(&rules[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove rule %s: %w", rules[i], err))
		}
	}
	routes, err := nodeTableRoutes()
	errs = append(errs, err)
	for i := range routes {
		if err := netlink.RouteDel(&routes[i]); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("remove route %s: %w", routes[i].Dst, err))
		}
	}
	return errors.Join(errs...)
}

// nodeAllowed are peer p's underlay addresses as allowed IPs (none:
// --encryption-node off).
func (t *Tunnel) nodeAllowed(p Peer) []netip.Addr {
	if !t.cfg.Node {
		return nil
	}
	var out []netip.Addr
	for _, a := range p.Underlay {
		out = append(out, a.Unmap())
	}
	return out
}
