package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
)

// Pair is the two containers of one network of a topology.
type Pair struct {
	Client, Server     string // netns names
	ClientIP, ServerIP netip.Addr
	MTU                int

	// What the small-packet rate test needs to write frames and watch
	// the path: the node netns, the interface names on both sides of
	// each veth pair, and the MACs of the client's frames (to the
	// gateway, the host veth, for xlane; to the server itself on a bridge).
	Node                       string
	ClientIf, ServerIf         string // in the containers
	ClientHostIf, ServerHostIf string // in the node netns
	ClientMAC, NextHopMAC      net.HardwareAddr
	// ClientEP, ServerEP are xlane endpoint IDs ("" for docker).
	ClientEP, ServerEP string
}

// LinkMAC is the MAC address of ifname in netns ns.
func LinkMAC(ctx context.Context, ns, ifname string) (net.HardwareAddr, error) {
	out, err := Run(ctx, "ip", "-n", ns, "-j", "link", "show", "dev", ifname)
	if err != nil {
		return nil, err
	}
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return nil, fmt.Errorf("ip -j link show %s in %s: %q: %v", ifname, ns, out, err)
	}
	return net.ParseMAC(links[0].Address)
}
