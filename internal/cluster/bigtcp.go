package cluster

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// bigGSO is the largest GSO packet a device without BIG TCP sends (64 KiB).
const bigGSO = 65536

// BigTCPOff says, per family, why BIG TCP must stay off for a network
// created with --big-tcp auto, from what the cluster knows of the path
// between nodes, or "" where nothing there stands in its way. The
// calibration measures two endpoints on one node; a cluster network's
// traffic also leaves the node, and a pod's veth sets one GSO size for
// every destination:
//
//   - vxlan routing: the overlay carries GSO packets of at most 64 KiB,
//     so each BIG TCP aggregate to another node is segmented in software
//     before it is encapsulated (Cilium refuses BIG TCP with tunnelling
//     for the same reason). bench/peers measured pod to pod across nodes
//     at 2.15 Gbit/s with it on against 6.78 off (2026-11-29).
//   - native routing: the uplink sends what its GSO limit of the family
//     allows (IPv4: gso_ipv4_max_size, IPv6: gso_max_size; the kernel
//     keeps them apart above 64 KiB); at 64 KiB every aggregate to another
//     node is segmented there. A NIC set up for BIG TCP (its limits
//     raised, as Cilium's --enable-ipv4-big-tcp does on its devices) lets
//     it through.
//
// A network that lies in no cluster CIDR (node-local, the calibration's
// own) and a daemon that runs alone are not concerned.
func (c *Cluster) BigTCPOff(n *model.Network) (off4, off6 string) {
	if !c.joined || !c.inCluster(n.Subnets) {
		return "", ""
	}
	if c.routing == model.RoutingVXLAN {
		why := "off: the pods reach other nodes over the VXLAN overlay, which carries GSO packets of at most 64 KiB"
		return why, why
	}
	if c.cfg.Uplink == "" {
		return "", ""
	}
	l, err := netlink.LinkByName(c.cfg.Uplink)
	if err != nil {
		return "", ""
	}
	a := l.Attrs()
	return uplinkBigTCPOff(c.cfg.Uplink, "gso_ipv4_max_size", "gro_ipv4_max_size", a.GSOIPv4MaxSize, a.TSOMaxSize),
		uplinkBigTCPOff(c.cfg.Uplink, "gso_max_size", "gro_max_size", a.GSOMaxSize, a.TSOMaxSize)
}

// uplinkBigTCPOff is BigTCPOff's rule for one family on a native
// uplink whose GSO limit attribute gsoAttr is gso (0: the kernel does not
// say; IPv4's before 6.3, which has no IPv4 BIG TCP either) and whose
// driver takes GSO packets of up to tso bytes (tso_max_size; 0: unknown).
func uplinkBigTCPOff(uplink, gsoAttr, groAttr string, gso, tso uint32) string {
	if gso != 0 && gso > bigGSO {
		return ""
	}
	why := fmt.Sprintf("off: the pods reach other nodes through uplink %s, which sends GSO packets of at most %d bytes (its %s)", uplink, max(gso, bigGSO), gsoAttr)
	if tso > bigGSO {
		// What an operator can do: the device takes more (Cilium's
		// BIG TCP sets min(tso_max_size, 192 KiB)).
		size := min(tso, 196608)
		why += fmt.Sprintf("; it takes up to %d (tso_max_size): `ip link set %s %s %d %s %d` sets it up for BIG TCP", tso, uplink, gsoAttr, size, groAttr, size)
	}
	return why
}
