package cluster

import (
	"slices"

	"github.com/xlane-dev/xlane/internal/model"
)

// SyncNodes makes the cluster's nodes equal to want, the whole set (the
// --nodes file's records, or the Kubernetes API's Node objects): a node
// not in it is removed, a changed one replaced (remove, then add; with
// encryption a peer whose WireGuard key alone changed is updated in
// place, SetNodeKey), an equal one left alone. The adds are one
// transaction (AddNodes: 500 Nodes took 7 s one by one, issue 32). A
// record the node checks refuse is logged and skipped: the others still
// apply.
func (c *Cluster) SyncNodes(want []model.Node) error {
	have, err := c.Nodes()
	if err != nil {
		return err
	}
	wanted := map[string]model.Node{}
	for _, w := range want {
		wanted[w.Name] = w
	}
	for _, h := range have {
		w, ok := wanted[h.Name]
		if ok && sameNode(&h, &w) {
			delete(wanted, h.Name)
			continue
		}
		if ok && c.wg != nil && sameButKey(&h, &w) {
			// A peer's new key (its rotation): in place, its flows kept;
			// refused, the old record stays.
			delete(wanted, h.Name)
			if _, err := c.SetNodeKey(h.Name, w.WGPublicKey); err != nil {
				c.c.Log().Error("nodes: new key refused", "node", h.Name, "err", err)
			}
			continue
		}
		if err := c.RemoveNode(h.Name); err != nil {
			return err
		}
	}
	// This node first: its record picks the underlay family for the rest.
	order := slices.SortedFunc(func(yield func(model.Node) bool) {
		for _, w := range wanted {
			if !yield(w) {
				return
			}
		}
	}, func(a, b model.Node) int {
		switch {
		case a.Name == c.cfg.NodeName:
			return -1
		case b.Name == c.cfg.NodeName:
			return 1
		}
		return 0
	})
	if len(order) == 0 {
		return nil
	}
	return c.AddNodes(order)
}

// sameNode says whether the record h is what w asks for.
func sameNode(h, w *model.Node) bool {
	return h.MTU == w.MTU && slices.Equal(h.Underlay, w.Underlay) && slices.Equal(h.PodCIDRs, w.PodCIDRs) &&
		(h.Self || h.WGPublicKey == w.WGPublicKey) // this node's is its daemon's
}
