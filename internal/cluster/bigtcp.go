package cluster

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// bigGSO is the largest GSO packet a device without BIG TCP sends (64 KiB).
const bigGSO = 65536

// BigTCPOff says why BIG TCP must stay off for a network created with
// --big-tcp auto, from what the cluster knows of the path between nodes,
// or "" where nothing there stands in its way. The calibration measures
// two endpoints on one node; a cluster network's traffic also leaves the
// node, and a pod's veth sets one GSO size for every destination:
//
//   - vxlan routing: the overlay carries GSO packets of at most 64 KiB,
//     so each BIG TCP aggregate to another node is segmented in software
//     before it is encapsulated (Cilium refuses BIG TCP with tunnelling
//     for the same reason). bench/peers measured pod to pod across nodes
//     at 2.15 Gbit/s with it on against 6.78 off (2026-11-29).
//   - native routing: the uplink sends what its gso_max_size allows; at
//     64 KiB every aggregate to another node is segmented there.
//
// A network that lies in no cluster CIDR (node-local, the calibration's
// own) and a daemon that runs alone are not concerned.
func (c *Cluster) BigTCPOff(n *model.Network) string {
	if !c.joined || !c.inCluster(n.Subnets) {
		return ""
	}
	if c.routing == model.RoutingVXLAN {
		return "off: the pods reach other nodes over the VXLAN overlay, which carries GSO packets of at most 64 KiB"
	}
	if c.cfg.Uplink == "" {
		return ""
	}
	l, err := netlink.LinkByName(c.cfg.Uplink)
	if err != nil {
		return ""
	}
	if max := l.Attrs().GSOMaxSize; max != 0 && max <= bigGSO {
		return fmt.Sprintf("off: the pods reach other nodes through uplink %s, which sends GSO packets of at most %d bytes (its gso_max_size)", c.cfg.Uplink, max)
	}
	return ""
}
