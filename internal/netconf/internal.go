package netconf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/model"
)

// Policy-rule priorities of internal networks: after the local table (0),
// before main (32766). Rules at these priorities belong to xlane.
const (
	rulePrefAllow    = 9000
	rulePrefProhibit = 9001
)

// internalRules are the policy rules that keep an internal network's
// subnet p to itself and the node:
//
//	9000: from p to p lookup main      endpoint to endpoint (kernel mode)
//	9000: iif lo to p lookup main      the node to its endpoints
//	9001: from p prohibit              endpoints to anywhere else
//	9001: to p prohibit                anywhere else to the endpoints
//
// Addresses of the node itself are found in the local table first, so
// endpoints still reach the node. bpf_fib_lookup honours the rules, so the
// BPF datapaths hand such packets to Linux, which answers with an ICMP
// "administratively prohibited".
func internalRules(p netip.Prefix) []*netlink.Rule {
	family := netlink.FAMILY_V4
	if p.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	rule := func(pref int, src, dst bool, iif string, typ uint8) *netlink.Rule {
		r := netlink.NewRule()
		r.Family, r.Priority, r.IifName = family, pref, iif
		if src {
			r.Src = ipnet(p)
		}
		if dst {
			r.Dst = ipnet(p)
		}
		if typ == unix.RTN_PROHIBIT {
			r.Type = typ
		} else {
			r.Table = unix.RT_TABLE_MAIN
		}
		return r
	}
	return []*netlink.Rule{
		rule(rulePrefAllow, true, true, "", unix.RTN_UNICAST),
		rule(rulePrefAllow, false, true, "lo", unix.RTN_UNICAST),
		rule(rulePrefProhibit, true, false, "", unix.RTN_PROHIBIT),
		rule(rulePrefProhibit, false, true, "", unix.RTN_PROHIBIT),
	}
}

// EnsureInternal adds the policy rules of an internal network (none for
// any other network). Idempotent.
func EnsureInternal(n *model.Network) error {
	if !n.Internal {
		return nil
	}
	for _, p := range n.Subnets {
		for _, r := range internalRules(p) {
			if err := netlink.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add policy rule for internal subnet %s: %w", p, err)
			}
		}
	}
	return nil
}

// DeleteInternal removes what EnsureInternal added. Missing rules are fine.
func DeleteInternal(n *model.Network) error {
	for _, p := range n.Subnets {
		for _, r := range internalRules(p) {
			if err := netlink.RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete policy rule for internal subnet %s: %w", p, err)
			}
		}
	}
	return nil
}

// PruneInternal removes xlane's policy rules that belong to no internal
// network in nets (left by a crash between kernel and store work).
func PruneInternal(nets []model.Network) error {
	keep := map[netip.Prefix]bool{}
	for _, n := range nets {
		if n.Internal {
			for _, p := range n.Subnets {
				keep[p] = true
			}
		}
	}
	var errs []error
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := retryDump(func() ([]netlink.Rule, error) { return netlink.RuleList(family) })
		if errors.Is(err, unix.EAFNOSUPPORT) {
			continue // no IPv6 here: no rules of that family either
		}
		if err != nil {
			return fmt.Errorf("list policy rules: %w", err)
		}
		for i := range rules {
			r := &rules[i]
			if r.Priority != rulePrefAllow && r.Priority != rulePrefProhibit {
				continue
			}
			sel := r.Dst
			if sel == nil {
				sel = r.Src
			}
			if sel == nil {
				continue
			}
			p, ok := netip.AddrFromSlice(sel.IP)
			bits, _ := sel.Mask.Size()
			if ok && keep[netip.PrefixFrom(p.Unmap(), bits)] {
				continue
			}
			if err := netlink.RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete stale policy rule %v: %w", r, err))
			}
		}
	}
	return errors.Join(errs...)
}
