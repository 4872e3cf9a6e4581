package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

// Scenario 1 of the write-up: one node, pods on several kinds of paths,
// each measured through xlane and through Linux in the same run:
//
//	l2       two pods of one subnet      xlane: one network (tc)       linux: a bridge
//	l3       pods of two subnets         xlane: two networks            linux: routed veths
//	l3-nat   a pod to a host behind the  xlane: masquerade in BPF       linux: iptables MASQUERADE
//	         node's uplink
//	nat-vxlan  a pod to a service VIP    xlane: service (DNAT) + VXLAN  linux: iptables DNAT + VXLAN
//	         whose backend is a pod on   (the scenario-2 clusters: "routing with NAT over VXLAN")
//	         the other node
//	vlan-vxlan a host on VLAN 100 of     xlane: a --vlan network         linux: none on a kernel
//	         node 1's uplink to a pod    (vlan.go)                      without 802.1Q (the
//	         on node 2                                                  reason is printed)
var paths1 = []string{"l2", "l3", "l3-nat"}

// path1 is one path of one implementation: iperf3 from client to server.
type path1 struct {
	impl, path     string
	client, server string // namespaces
	dst            string // the address the client dials
	bind           string // the server's address
	ready          bool
}

// buildScenario1 makes the xlane node and the Linux node of scenario 1.
func buildScenario1(ctx context.Context, undo *harness.UndoStack, tmp, bins, id string) ([]*path1, error) {
	x, err := buildScenario1Xlane(ctx, undo, tmp, bins, id+"-x")
	if err != nil {
		return nil, fmt.Errorf("xlane: %w", err)
	}
	l, err := buildScenario1Linux(ctx, undo, id+"-l")
	if err != nil {
		return nil, fmt.Errorf("linux: %w", err)
	}
	return append(x, l...), nil
}

// buildScenario1Xlane: xlaned with --uplink ul0 towards ext
// (192.168.89.0/24); networks a (pods 1, 2), b (pod 3), m (pod 4,
// masqueraded to ext).
func buildScenario1Xlane(ctx context.Context, undo *harness.UndoStack, tmp, bins, id string) ([]*path1, error) {
	node, ext := id+"-n", id+"-ext"
	pods := []string{id + "-p1", id + "-p2", id + "-p3", id + "-p4"}
	if err := harness.AddNamespaces(ctx, undo, append([]string{node, ext}, pods...)...); err != nil {
		return nil, err
	}
	if err := harness.RunAll(ctx, uplinkCmds(node, ext, "192.168.89")...); err != nil {
		return nil, err
	}
	dir := filepath.Join(tmp, node)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if _, err := harness.StartXlaned(ctx, undo, harness.Xlaned{Name: "xlaned " + node, Netns: node, Bins: bins, Dir: dir,
		PinDir: "/sys/fs/bpf/" + node, Timeout: 30 * time.Second,
		Args: []string{"--docker-plugin-socket=", "--uplink", "ul0"}}); err != nil {
		return nil, err
	}
	for _, n := range [][]string{
		{"a", "10.249.1.0/24", "--masquerade=false"},
		{"b", "10.249.2.0/24", "--masquerade=false"},
		{"m", "10.249.3.0/24"},
	} {
		if _, err := harness.Xlane(ctx, bins, dir, append([]string{"network", "create", n[0], "--mode", "tc", "--subnet", n[1]}, n[2:]...)...); err != nil {
			return nil, err
		}
	}
	ip := map[string]string{}
	for i, net := range []string{"a", "a", "b", "m"} {
		out, err := harness.Xlane(ctx, bins, dir, "endpoint", "add", net, "--netns", pods[i], "-o", "json")
		if err != nil {
			return nil, err
		}
		ep, err := harness.ParseEndpoint(out)
		if err != nil {
			return nil, err
		}
		if len(ep.IPs) == 0 {
			return nil, fmt.Errorf("endpoint in %s has no address", net)
		}
		ip[pods[i]] = ep.IPs[0].String()
	}
	return []*path1{
		{impl: "xlane-tc", path: "l2", client: pods[0], server: pods[1], dst: ip[pods[1]], bind: ip[pods[1]]},
		{impl: "xlane-tc", path: "l3", client: pods[0], server: pods[2], dst: ip[pods[2]], bind: ip[pods[2]]},
		{impl: "xlane-tc", path: "l3-nat", client: pods[3], server: ext, dst: "192.168.89.2", bind: "192.168.89.2"},
	}, nil
}

// uplinkCmds links node's ul0 (prefix.1) to ext's eth0 (prefix.2), ext
// routing everything back through the node.
func uplinkCmds(node, ext, prefix string) [][]string {
	return [][]string{
		{"ip", "-n", node, "link", "add", "ul0", "type", "veth", "peer", "name", "eth0", "netns", ext},
		{"ip", "-n", node, "addr", "add", prefix + ".1/24", "dev", "ul0"},
		{"ip", "-n", node, "link", "set", "ul0", "up"},
		{"ip", "-n", node, "link", "set", "lo", "up"},
		{"ip", "-n", ext, "addr", "add", prefix + ".2/24", "dev", "eth0"},
		{"ip", "-n", ext, "link", "set", "eth0", "up"},
	}
}

// buildScenario1Linux: the same paths by hand: pods 1 and 2 on a bridge
// (10.250.1.0/24), pod 3 on a routed veth (10.250.2.2), pod 4 routed
// (10.250.3.2) and masqueraded by iptables to ext (192.168.90.0/24).
func buildScenario1Linux(ctx context.Context, undo *harness.UndoStack, id string) ([]*path1, error) {
	node, ext := id+"-n", id+"-ext"
	pods := []string{id + "-p1", id + "-p2", id + "-p3", id + "-p4"}
	if err := harness.AddNamespaces(ctx, undo, append([]string{node, ext}, pods...)...); err != nil {
		return nil, err
	}
	cmds := uplinkCmds(node, ext, "192.168.90")
	cmds = append(cmds,
		[]string{"ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		[]string{"ip", "-n", node, "link", "add", "br0", "type", "bridge"},
		[]string{"ip", "-n", node, "addr", "add", "10.250.1.1/24", "dev", "br0"},
		[]string{"ip", "-n", node, "link", "set", "br0", "up"})
	addr := []string{"10.250.1.2", "10.250.1.3", "10.250.2.2", "10.250.3.2"}
	for i, p := range pods {
		host := fmt.Sprintf("h%d", i+1)
		cmds = append(cmds,
			[]string{"ip", "-n", node, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p},
			[]string{"ip", "-n", p, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", p, "link", "set", "lo", "up"})
		if i < 2 { // on the bridge
			cmds = append(cmds,
				[]string{"ip", "-n", p, "addr", "add", addr[i] + "/24", "dev", "eth0"},
				[]string{"ip", "-n", node, "link", "set", host, "master", "br0", "up"},
				[]string{"ip", "-n", p, "route", "add", "default", "via", "10.250.1.1"})
			continue
		}
		gw := fmt.Sprintf("10.250.%d.1", i)
		cmds = append(cmds,
			[]string{"ip", "-n", p, "addr", "add", addr[i] + "/24", "dev", "eth0"},
			[]string{"ip", "-n", node, "addr", "add", gw + "/32", "dev", host},
			[]string{"ip", "-n", node, "link", "set", host, "up"},
			[]string{"ip", "-n", node, "route", "add", addr[i] + "/32", "dev", host},
			[]string{"ip", "-n", p, "route", "add", gw + "/32", "dev", "eth0"},
			[]string{"ip", "-n", p, "route", "add", "default", "via", gw})
	}
	cmds = append(cmds, []string{"ip", "netns", "exec", node, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.250.3.0/24", "-o", "ul0", "-j", "MASQUERADE"})
	if err := harness.RunAll(ctx, cmds...); err != nil {
		return nil, err
	}
	return []*path1{
		{impl: "linux", path: "l2", client: pods[0], server: pods[1], dst: addr[1], bind: addr[1]},
		{impl: "linux", path: "l3", client: pods[0], server: pods[2], dst: addr[2], bind: addr[2]},
		{impl: "linux", path: "l3-nat", client: pods[3], server: ext, dst: "192.168.90.2", bind: "192.168.90.2"},
	}, nil
}
