package cluster

import (
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// MTU between nodes (docs/multinode.md): a node record may say its
// underlay's MTU. A packet too big for this node's own overlay goes to
// Linux, which answers the sender (PMTU); one too big for a peer's
// underlay would be dropped there without a word. So a network of the
// cluster may not carry more than every declared peer takes.

// podMTUOver is the largest pod packet an underlay of MTU mtu carries
// between nodes: less the VXLAN overhead of the family tunnels use (this
// node's underlay's, IPv4 first; the peer's own before this node is
// known), nothing with native routing.
func (c *Cluster) podMTUOver(mtu int, self, peer *model.Node) int {
	if c.routing == model.RoutingNative {
		return mtu
	}
	ref := peer
	if self != nil {
		ref = self
	}
	if _, ok := ref.UnderlayOf(true); ok {
		return mtu - netconf.VXLANOverhead4
	}
	return mtu - netconf.VXLANOverhead6
}

// peersPodMTU is the smallest pod MTU the cluster's peers declare they
// carry (podMTUOver) and the peer that sets it; 0 when none declares one.
func (c *Cluster) peersPodMTU(tx *store.Tx) (int, string, error) {
	if !c.joined {
		return 0, "", nil
	}
	nodes, err := tx.Nodes()
	if err != nil {
		return 0, "", err
	}
	self := SelfNode(nodes)
	least, who := 0, ""
	for i := range nodes {
		n := &nodes[i]
		if n.Self || n.MTU == 0 {
			continue
		}
		if m := c.podMTUOver(n.MTU, self, n); least == 0 || m < least {
			least, who = m, n.Name
		}
	}
	return least, who, nil
}

// validateNodeMTU checks a node record's MTU: this node's must be its
// underlay device's; a peer's must carry every network of the cluster
// (nodes: the nodes recorded, this node's among them).
func (c *Cluster) validateNodeMTU(tx *store.Tx, nodes []model.Node, n *model.Node, mtu int) error {
	if mtu == 0 {
		return nil
	}
	if mtu < 1280 || mtu > 65535 {
		return model.Fieldf("mtu", "%d: must be between 1280 and 65535", mtu)
	}
	n.MTU = mtu
	if n.Self {
		if l := netconf.UnderlayLink(n.Underlay[0]); l != nil && l.Attrs().MTU != mtu {
			return model.Fieldf("mtu", "%d: this node's underlay device %s has MTU %d", mtu, l.Attrs().Name, l.Attrs().MTU)
		}
		return nil
	}
	carries := c.podMTUOver(mtu, SelfNode(nodes), n)
	nets, err := tx.Networks()
	if err != nil {
		return err
	}
	for _, nw := range nets {
		if c.inCluster(nw.Subnets) && nw.MTU > carries {
			return model.Fieldf("mtu", "node %q's underlay MTU %d carries pod packets of %d bytes at most (%s routing), and this node's network %q has MTU %d: its full-size packets would be dropped on the way without an error; lower the network's MTU first",
				n.Name, mtu, carries, c.routing, nw.Name, nw.MTU)
		}
	}
	return nil
}

// ValidateNetwork is network create's view of the cluster
// (core.NetworkValidator): the default subnets (NetworkSubnets, at
// core.CheckDefaults), the MTU (NetworkMTU, at core.CheckShape).
func (c *Cluster) ValidateNetwork(tx *store.Tx, at core.NetworkCheck, req *api.NetworkCreate, n *model.Network) error {
	switch at {
	case core.CheckDefaults:
		return c.NetworkSubnets(tx, req)
	case core.CheckShape:
		return c.NetworkMTU(tx, n, req.MTU)
	}
	return nil
}

// NetworkMTU sets the MTU of network n of the cluster: by default
// the overlay's, lowered to what every declared peer carries; an MTU
// asked for above that is refused.
func (c *Cluster) NetworkMTU(tx *store.Tx, n *model.Network, asked int) error {
	if !c.inCluster(n.Subnets) {
		return nil
	}
	least, who, err := c.peersPodMTU(tx)
	if err != nil {
		return err
	}
	if asked == 0 && n.VLAN == 0 && c.mtu != 0 {
		n.MTU = c.mtu // the underlay's, less VXLAN's overhead
	}
	if least == 0 || n.MTU <= least {
		return nil
	}
	if asked == 0 {
		n.MTU = least
		return nil
	}
	return model.Fieldf("mtu", "%d: node %q's underlay carries pod packets of %d bytes at most; bigger ones would be dropped there without an error", asked, who, least)
}
