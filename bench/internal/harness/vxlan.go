package harness

import (
	"context"
	"fmt"
)

// FlannelPeer is the other node of a FlannelVXLAN link.
type FlannelPeer struct {
	Underlay string // its underlay address
	MAC      string // its VXLAN device's MAC
	Subnet   string // its pods' /24, "10.246.2" for 10.246.2.0/24
}

// FlannelVXLAN is flannel's vxlan backend by hand, the Linux baseline of
// the cross-node benchmarks (bench/multinode, bench/k8s): in the node
// namespace node a VXLAN device dev (VNI 42, port 4789, MTU 1450, MAC mac,
// on underlay device ul whose address is local, no learning) holding
// subnet.0/32, and for each peer its subnet routed via peer.0 onlink with a
// permanent neighbour and an fdb entry to its underlay address.
func FlannelVXLAN(ctx context.Context, node, dev, ul, local, mac, subnet string, peers ...FlannelPeer) error {
	cmds := [][]string{
		{"ip", "-n", node, "link", "add", dev, "address", mac, "mtu", "1450", "type", "vxlan", "id", "42", "dstport", "4789",
			"local", local, "dev", ul, "nolearning"},
		{"ip", "-n", node, "addr", "add", subnet + ".0/32", "dev", dev},
		{"ip", "-n", node, "link", "set", dev, "up"},
	}
	for _, p := range peers {
		cmds = append(cmds,
			[]string{"ip", "-n", node, "neigh", "add", p.Subnet + ".0", "lladdr", p.MAC, "dev", dev, "nud", "permanent"},
			[]string{"ip", "-n", node, "route", "add", p.Subnet + ".0/24", "via", p.Subnet + ".0", "dev", dev, "onlink"},
			[]string{"bridge", "-n", node, "fdb", "append", p.MAC, "dev", dev, "dst", p.Underlay})
	}
	if err := RunAll(ctx, cmds...); err != nil {
		return fmt.Errorf("flannel-style vxlan on %s: %w", node, err)
	}
	return nil
}
