package services

import (
	"net/netip"

	"github.com/xlane-dev/xlane/internal/ipam"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// checkVIPSubnets refuses a VIP that is the subnet or broadcast address of
// one of this node's networks or an IPv4 broadcast address of the node's
// own devices (what model.VIPAddrProblem cannot know): a VIP there would
// take the node's broadcasts to the backends. field names the VIP in the
// request ("vip", "services[3].vip").
func checkVIPSubnets(tx *store.Tx, field string, vip netip.Addr) error {
	nets, err := tx.Networks()
	if err != nil {
		return err
	}
	for _, n := range nets {
		for _, p := range n.Subnets {
			if p.Contains(vip) && ipam.Reserved(p, netip.Addr{}, vip) {
				return model.Fieldf(field, "%s: the subnet or broadcast address of %s (network %q)", vip, p, n.Name)
			}
		}
	}
	if dev := netconf.BroadcastOf(vip); dev != "" {
		return model.Fieldf(field, "%s: the broadcast address of the node's subnet on %s", vip, dev)
	}
	return nil
}
