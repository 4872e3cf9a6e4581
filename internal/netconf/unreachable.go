package netconf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrRouteTaken: the node has a route of its own at a network's subnet,
// which xlane leaves alone (validation refuses such subnets; a route added
// after the network was made gets here).
var ErrRouteTaken = errors.New("the node has another route to the subnet (not xlane's; left alone)")

// addUnreachable adds the network's unreachable route for p without
// touching any other route: the add is exclusive (NLM_F_EXCL, what
// RouteAdd sends), so a route of the node's at the same prefix makes it fail
// instead of being replaced. An unreachable route already there is taken as
// xlane's own (a restart re-applying the store).
func addUnreachable(p netip.Prefix) error {
	err := netlink.RouteAdd(unreachableRoute(p))
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EEXIST) {
		if _, ok, lerr := findUnreachable(p); lerr == nil && ok {
			return nil
		}
		return fmt.Errorf("add unreachable route %s: %w", p, ErrRouteTaken)
	}
	return fmt.Errorf("add unreachable route %s: %w", p, err)
}

// delUnreachable deletes the unreachable route for p, and only that: a
// route of another type at the same prefix is not xlane's and stays.
func delUnreachable(p netip.Prefix) error {
	r, ok, err := findUnreachable(p)
	if err != nil || !ok {
		return err
	}
	if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("delete unreachable route %s: %w", p, err)
	}
	return nil
}

func unreachableRoute(p netip.Prefix) *netlink.Route {
	return &netlink.Route{Dst: ipnet(p), Type: unix.RTN_UNREACHABLE, Table: unix.RT_TABLE_MAIN, Protocol: Proto}
}

// findUnreachable returns the main table's unreachable route to exactly p.
func findUnreachable(p netip.Prefix) (netlink.Route, bool, error) {
	family := netlink.FAMILY_V4
	if p.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	filter := unreachableRoute(p)
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(family, filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return netlink.Route{}, false, fmt.Errorf("list routes to %s: %w", p, err)
	}
	for _, r := range routes {
		if r.Type == unix.RTN_UNREACHABLE {
			return r, true, nil
		}
	}
	return netlink.Route{}, false, nil
}
