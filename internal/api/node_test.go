package api

import (
	"net/netip"
	"slices"
	"testing"
)

// TestNodeAddNode: a node add request (the API's, the CLI's, a --nodes
// file record) reads into the record the cluster checks, the WireGuard
// public key included (text: the cluster checks it).
func TestNodeAddNode(t *testing.T) {
	const key = "YM3W+yDWap7cOCTJa/1PAephpf/EOv8zWph1iJ4Wm28="
	n, err := NodeAdd{Name: "n2", Underlay: []string{"192.168.77.2"}, PodCIDRs: []string{"10.244.2.0/24"}, MTU: 1500, WGPublicKey: key}.Node()
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "n2" || n.MTU != 1500 || n.WGPublicKey != key || !slices.Equal(n.Underlay, []netip.Addr{netip.MustParseAddr("192.168.77.2")}) ||
		!slices.Equal(n.PodCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}) {
		t.Errorf("node %+v", n)
	}
}
