package control

import (
	"fmt"
	"net/netip"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// blockGuard is what the uplink blocklist (sources dropped on arrival)
// must not cover: a prefix over any of these cuts the node off, both
// ways, since the replies to its own connections arrive from them too.
type blockGuard struct {
	addrs []netconf.Landmark // the node's addresses, its gateways, peer nodes' underlay
	cidrs []netip.Prefix     // the cluster's: pods of other nodes
}

// newBlockGuard gathers the node's landmarks (in the namespace of the
// calling thread: xlaned's) and the cluster's.
func (f *Firewall) newBlockGuard(tx *store.Tx) (*blockGuard, error) {
	marks, err := netconf.NodeLandmarks()
	if err != nil {
		return nil, err
	}
	g := &blockGuard{addrs: marks}
	if cl := f.cfg.Cluster; cl != nil && cl.Joined() {
		g.cidrs = cl.CIDRs()
		nodes, err := tx.Nodes()
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			for _, a := range n.Underlay {
				if !n.Self {
					g.addrs = append(g.addrs, netconf.Landmark{Addr: a, What: fmt.Sprintf("node %q's underlay address %s", n.Name, a)})
				}
			}
		}
	}
	return g, nil
}

// check refuses a prefix to block that is clearly self-harm: a whole
// address family, or one covering a landmark of the node.
func (g *blockGuard) check(field string, p netip.Prefix) error {
	if p.Bits() == 0 {
		return model.Fieldf(field, "%s: every source: the node would receive nothing on the uplink, not even the replies to its own connections", p)
	}
	for _, m := range g.addrs {
		if p.Contains(m.Addr) {
			return model.Fieldf(field, "%s: covers %s: the node would be cut off from it (block a narrower prefix)", p, m.What)
		}
	}
	for _, c := range g.cidrs {
		if p.Bits() <= c.Bits() && p.Contains(c.Addr()) {
			return model.Fieldf(field, "%s: covers the cluster CIDR %s: the node would be cut off from other nodes' pods (block a narrower prefix)", p, c)
		}
	}
	return nil
}
