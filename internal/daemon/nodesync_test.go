package daemon

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/model"
)

// A sync of many nodes (Kubernetes mode's Nodes, a --nodes file) is one
// store transaction, not one per node (issue 32: 500 Nodes took 7 s one
// by one); a node refused by its checks or failing in the datapath is
// left out, nothing of it behind, and the others are added.
func TestSyncNodesOneTransaction(t *testing.T) {
	cfg := Config{Cluster: cluster.Config{NodeName: "self", ClusterCIDRs: []string{"10.192.0.0/12"}}}
	inNodeWith(t, cfg, func(d *Daemon) {
		const n = 300
		var want []model.Node
		for i := range n {
			want = append(want, model.Node{Name: fmt.Sprintf("p%d", i),
				Underlay: []netip.Addr{netip.AddrFrom4([4]byte{172, 16, byte(i / 200), byte(i%200 + 1)})},
				PodCIDRs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(192 + i>>8), byte(i), 0}), 24)}})
		}
		// Refused by the checks: its pod CIDR is p0's (whichever of the
		// two the sync takes first wins: the order is a map's).
		want = append(want, model.Node{Name: "overlap", Underlay: []netip.Addr{netip.MustParseAddr("172.17.0.1")},
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.192.0.0/24")}})
		// Failing in the datapath: the 8th node applied.
		applied := 0
		d.faults.Hook = func(p string) error {
			if p != "node-applied" {
				return nil
			}
			applied++
			if applied == 8 {
				return errInjected
			}
			return nil
		}
		var commits atomic.Int64
		d.store.OnCommit(func() { commits.Add(1) })
		if err := d.f.Cluster.SyncNodes(want); err != nil {
			t.Fatal(err)
		}
		if c := commits.Load(); c != 1 {
			t.Errorf("SyncNodes of %d nodes: %d store commits, want 1", n+1, c)
		}
		nodes, err := d.f.Cluster.Nodes()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]model.Node{}
		for _, nd := range nodes {
			got[nd.Name] = nd
		}
		_, p0 := got["p0"]
		_, ov := got["overlap"]
		if p0 == ov {
			t.Errorf("p0 recorded %v, the node with its pod CIDR %v: want exactly one", p0, ov)
		}
		var missing []string
		for _, w := range want {
			if _, ok := got[w.Name]; !ok && w.Name != "p0" && w.Name != "overlap" {
				missing = append(missing, w.Name)
			}
		}
		if len(missing) != 1 || len(got) != n-1 {
			t.Fatalf("%d nodes recorded, missing %v: want %d, all but one of p0 and its overlap and the one failed", len(got), missing, n-1)
		}
		failed := missing[0]
		peers, err := d.dp.Peers()
		if err != nil {
			t.Fatal(err)
		}
		inMap := map[netip.Prefix]bool{}
		for _, p := range peers {
			inMap[p.Prefix] = true
		}
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		routed := map[string]bool{}
		for _, r := range routes {
			if r.Dst != nil {
				routed[r.Dst.String()] = true
			}
		}
		for _, w := range want {
			p := w.PodCIDRs[0]
			_, added := got[w.Name]
			if added && !inMap[p] || added && !routed[p.String()] || w.Name == failed && (inMap[p] || routed[p.String()]) {
				t.Errorf("node %s (added %v): peer entry %v, route %v", w.Name, added, inMap[p], routed[p.String()])
			}
		}
		// Again: nothing to do, no write.
		commits.Store(0)
		d.faults.Hook = nil
		if err := d.f.Cluster.SyncNodes(want); err != nil {
			t.Fatal(err)
		}
		if c := commits.Load(); c != 1 { // the failed node, now added
			t.Errorf("second SyncNodes: %d commits, want 1 (the node that failed before)", c)
		}
		if nodes, _ := d.f.Cluster.Nodes(); len(nodes) != n {
			t.Errorf("after the second sync %d nodes, want %d", len(nodes), n)
		}
	})
}
