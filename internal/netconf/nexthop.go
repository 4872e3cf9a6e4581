package netconf

import (
	"net/netip"

	"github.com/vishvananda/netlink"
)

// BehindRouter reports whether the kernel reaches addr through a gateway
// (not on a connected segment): a native route "via addr" cannot be made
// then. A peer node across a router is such; its pods' route comes from
// the router (BGP, internal/bgp). No route at all is not "behind a
// router" (the caller's route then fails, saying so).
func BehindRouter(addr netip.Addr) bool {
	rs, err := netlink.RouteGet(addr.AsSlice())
	return err == nil && len(rs) > 0 && rs[0].Gw != nil
}
