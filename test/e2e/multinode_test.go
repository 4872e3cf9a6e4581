package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// Three nodes, each a namespace with its own xlaned, joined by an underlay
// bridge in a namespace of its own; a pod (a namespace, through the
// endpoint API) on each node, in the network "pods" that takes each node's
// pod CIDRs.
//
//	 c1            c2            c3
//	 | veth        | veth        | veth
//	node1         node2         node3      xlaned --node-name nI --cluster-cidr 10.244.0.0/16,fd00:244::/48
//	 | ul0         | ul0         | ul0     192.168.77.I/24, fd00:77::I/64
//	 +------------ br0 ----------+         (namespace "ul")
//
// vxlan4: the overlay over the IPv4 underlay; vxlan6: over the IPv6 one
// (nodes known by their IPv6 address only); native: routes via the
// underlay addresses, no encapsulation. n1 and n2 run the variant's mode,
// n3 another (every mode meets the others across nodes; kernel mode, no
// BPF on its pod's veth, over the overlay and natively routed). Every
// node has --uplink ul0: subtest "external" reaches the first two from a
// client off the cluster (multinode_external_test.go; it was
// TestMultiNodeExternal, on clusters of its own).
func TestMultiNode(t *testing.T) {
	for _, tc := range []struct {
		name, routing, mode, mode3 string
		v6Underlay                 bool
		ulMTU, mtu                 int // the underlay's, the pods' (derived)
	}{
		{"vxlan4", "vxlan", "tc", "xdp-generic", false, 9000, 8950},
		// XDP hands cross-node packets to the tc program (pass_overlay).
		{"vxlan6-xdp", "vxlan", "xdp", "kernel", true, 1500, 1430},
		{"native", "native", "tc", "kernel", false, 1500, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testMultiNode(t, tc.routing, []string{tc.mode, tc.mode, tc.mode3}, tc.v6Underlay, tc.ulMTU, tc.mtu)
		})
	}
}

type clusterNode struct {
	*node
	name     string
	under4   netip.Addr
	under6   netip.Addr
	pod4     netip.Prefix
	pod6     netip.Prefix
	pod      string // the pod's namespace
	ep       api.EndpointInfo
	v6Unders bool
	// nodesFile: the cluster's nodes come from this file (xlaned --nodes),
	// not from the CLI.
	nodesFile string
	ul        string // the underlay's namespace
	mode      string // the pod's network's
	// wgKey is the node's WireGuard public key (xlaned --encryption
	// wireguard; "": off), given to every node with its record.
	wgKey string
}

func (c *clusterNode) record() api.NodeAdd {
	r := api.NodeAdd{Name: c.name, PodCIDRs: []string{c.pod4.String(), c.pod6.String()}, Underlay: []string{c.under4.String(), c.under6.String()}}
	if c.v6Unders {
		r.Underlay = r.Underlay[1:]
	}
	r.WGPublicKey = c.wgKey
	return r
}

// writeNodes writes the --nodes file with cs' records.
func writeNodes(t *testing.T, path string, cs []*clusterNode) {
	t.Helper()
	var recs []api.NodeAdd
	for _, c := range cs {
		recs = append(recs, c.record())
	}
	raw, _ := json.Marshal(recs)
	if err := os.WriteFile(path+".tmp", raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// waitNodes waits until c's daemon has n nodes.
func (c *clusterNode) waitNodes(t *testing.T, n int) {
	t.Helper()
	var nodes []model.Node
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		c.mustXlane(&nodes, "node", "ls")
		if len(nodes) == n {
			return
		}
	}
	t.Fatalf("%s: %d nodes from the nodes file, want %d: %+v", c.name, len(nodes), n, nodes)
}

func (c *clusterNode) addArgs() []string {
	args := []string{"node", "add", c.name, "--pod-cidr", c.pod4.String(), "--pod-cidr", c.pod6.String()}
	if c.wgKey != "" {
		args = append(args, "--wg-public-key", c.wgKey)
	}
	if c.v6Unders {
		return append(args, "--underlay", c.under6.String())
	}
	return append(args, "--underlay", c.under4.String(), "--underlay", c.under6.String())
}

func (c *clusterNode) ip4() netip.Addr { return c.ep.IPs[0] }
func (c *clusterNode) ip6() netip.Addr { return c.ep.IPs[1] }

// newCluster starts a node per mode (its pods' network's) on one underlay
// bridge, with xlaned's extra flags, tells every node about every node,
// and puts a pod on each.
func newCluster(t *testing.T, routing string, modes []string, v6Underlay bool, ulMTU int, flags ...string) []*clusterNode {
	t.Helper()
	// The native cluster takes its nodes from a file (--nodes), the
	// others from the CLI.
	nodesFile := ""
	if routing == "native" {
		nodesFile = filepath.Join(t.TempDir(), "nodes.json")
	}
	ul := newNetns(t, "ul")
	runIn(t, ul, "ip", "link", "add", "br0", "type", "bridge")
	runIn(t, ul, "ip", "link", "set", "br0", "up")
	var cs []*clusterNode
	for i := 1; i <= len(modes); i++ {
		c := &clusterNode{name: fmt.Sprintf("n%d", i), ul: ul,
			under4:   netip.MustParseAddr(fmt.Sprintf("192.168.77.%d", i)),
			under6:   netip.MustParseAddr(fmt.Sprintf("fd00:77::%d", i)),
			pod4:     netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)),
			pod6:     netip.MustParsePrefix(fmt.Sprintf("fd00:244:0:%d::/64", i)),
			v6Unders: v6Underlay, nodesFile: nodesFile, mode: modes[i-1]}
		c.node = newNode(t, func(n *node) {
			port := fmt.Sprintf("p%d", i)
			run(t, "ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", n.netns)
			run(t, "ip", "-n", ul, "link", "set", port, "mtu", fmt.Sprint(ulMTU), "master", "br0", "up")
			runIn(t, n.netns, "ip", "link", "set", "ul0", "mtu", fmt.Sprint(ulMTU))
			runIn(t, n.netns, "ip", "addr", "add", c.under4.String()+"/24", "dev", "ul0")
			runIn(t, n.netns, "ip", "addr", "add", c.under6.String()+"/64", "dev", "ul0", "nodad")
			runIn(t, n.netns, "ip", "link", "set", "ul0", "up")
			runIn(t, n.netns, "ip", "link", "set", "lo", "up")
			n.flags = append(n.flags, "--node-name", c.name, "--cluster-cidr", "10.244.0.0/16,fd00:244::/48", "--routing", routing)
			if nodesFile != "" {
				n.flags = append(n.flags, "--nodes", nodesFile)
			}
			n.flags = append(n.flags, flags...)
		})
		requireMode(t, c.node, modes[i-1]) // kernel_test.go
		var st api.Status
		c.mustXlane(&st, "status")
		if st.Cluster != nil && st.Cluster.Encryption != nil {
			c.wgKey = st.Cluster.Encryption.PublicKey
		}
		cs = append(cs, c)
	}
	if nodesFile != "" {
		writeNodes(t, nodesFile, cs)
		for _, c := range cs {
			c.waitNodes(t, len(cs))
		}
	} else {
		for _, c := range cs {
			for _, o := range cs {
				c.mustXlane(nil, o.addArgs()...)
			}
		}
	}
	for i, c := range cs {
		var net api.NetworkInfo
		c.mustXlane(&net, "network", "create", "pods", "--mode", modes[i])
		if len(net.Subnets) != 2 || net.Subnets[0] != c.pod4 || net.Subnets[1] != c.pod6 {
			t.Fatalf("%s: network subnets %v, want the node's pod CIDRs %s %s", c.name, net.Subnets, c.pod4, c.pod6)
		}
		c.pod = newNetns(t, "pod")
		c.mustXlane(&c.ep, "endpoint", "add", "pods", "--netns", c.pod)
		if len(c.ep.IPs) != 2 {
			t.Fatalf("%s: endpoint ips %v", c.name, c.ep.IPs)
		}
	}
	return cs
}

// overlayTxBytes is what c's VXLAN device has sent (encapsulated in the
// device, not in BPF).
func overlayTxBytes(t *testing.T, c *clusterNode) uint64 {
	t.Helper()
	out := runIn(t, c.node.netns, "ip", "-s", "-j", "link", "show", "dev", "xlvx0")
	var links []struct {
		Stats struct {
			TX struct {
				Bytes uint64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("%s: ip -s -j link show xlvx0: %v\n%s", c.name, err, out)
	}
	return links[0].Stats.TX.Bytes
}

func testMultiNode(t *testing.T, routing string, modes []string, v6Underlay bool, ulMTU, mtu int) {
	start := time.Now()
	cs := newCluster(t, routing, modes, v6Underlay, ulMTU, "--uplink", "ul0")
	t.Logf("three nodes up in %v", time.Since(start))
	t.Run("mtu", func(t *testing.T) {
		var net api.NetworkInfo
		cs[0].mustXlane(&net, "network", "inspect", "pods")
		if net.MTU != mtu {
			t.Errorf("network MTU %d, want %d (underlay %d less the overlay's overhead)", net.MTU, mtu, ulMTU)
		}
		if out := runIn(t, cs[0].pod, "ip", "link", "show", "eth0"); !strings.Contains(out, fmt.Sprintf("mtu %d ", mtu)) {
			t.Errorf("pod eth0: %s, want mtu %d", out, mtu)
		}
	})
	t.Run("ping", func(t *testing.T) {
		for _, a := range cs {
			for _, b := range cs {
				if a != b {
					ping(t, a.pod, b.ip4())
					ping(t, a.pod, b.ip6())
				}
			}
		}
	})
	t.Run("tcp", func(t *testing.T) {
		transfer(t, cs[0].pod, cs[1].pod, cs[1].ip4(), 32<<20)
		transfer(t, cs[2].pod, cs[0].pod, cs[0].ip6(), 32<<20)
		// To n3's pod (another mode; kernel mode's too), both families.
		transfer(t, cs[1].pod, cs[2].pod, cs[2].ip4(), 8<<20)
		transfer(t, cs[0].pod, cs[2].pod, cs[2].ip6(), 8<<20)
		// Big frames: no fragmentation, no loss at the MTU.
		runIn(t, cs[1].pod, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", fmt.Sprint(mtu-28), cs[2].ip4().String())
	})
	t.Run("fast path used", func(t *testing.T) {
		var ep api.EndpointInfo
		cs[0].mustXlane(&ep, "endpoint", "inspect", cs[0].ep.ID)
		want := "fwd_overlay"
		if routing == "native" {
			want = "fwd_fib"
		}
		if c := reason(ep, want, "from_endpoint"); c.Bytes < 32<<20 {
			t.Errorf("%s from %s = %d bytes, want the transfer's; counters %+v", want, ep.ID, c.Bytes, ep.Reasons)
		}
		// Encapsulated in BPF (--overlay-encap auto): n1's VXLAN device
		// carried next to nothing of its 40 MiB, TSO'd super-packets
		// included (TestMultiNodeKernels has a device-encapsulating node).
		if routing == "vxlan" {
			if tx := overlayTxBytes(t, cs[0]); tx > 4<<20 {
				t.Errorf("n1's VXLAN device sent %d bytes: the tc program's encapsulation was bypassed", tx)
			}
			// In tc mode the pod's TSO stays on: the encapsulation took
			// GSO super-packets, and the transfers' SHA-256 says their
			// segments arrived intact (xdp mode turns the pod's TSO off).
			if c := reason(ep, "fwd_overlay", "from_endpoint"); modes[0] == "tc" && c.Packets > 0 && c.Bytes/c.Packets <= 1500 {
				t.Errorf("fwd_overlay from %s: %d packets of %d bytes on average, want GSO super-packets (above the MTU)", ep.ID, c.Packets, c.Bytes/c.Packets)
			}
		}
		for _, r := range ep.Reasons {
			if r.Drop && r.Packets > 0 {
				t.Errorf("drop counter %s = %d, want 0", r.Reason, r.Packets)
			}
		}
	})
	t.Run("trace to another node", func(t *testing.T) {
		// xlane trace's verdict for a pod on n2, and what a connection
		// there really does: counted under the same reason by the
		// sender's program.
		want := "fwd_overlay"
		if routing == "native" {
			want = "fwd_fib"
		}
		for _, dst := range []netip.Addr{cs[1].ip4(), cs[1].ip6()} {
			ln := listenIn(t, cs[1].pod, netip.AddrPortFrom(dst, 8090))
			acceptAndClose(ln)
			var res api.TraceResult
			cs[0].mustXlane(&res, "trace", "--from", cs[0].ep.ID, "--to", netip.AddrPortFrom(dst, 8090).String())
			var route string
			for _, h := range res.Hops {
				for _, s := range h.Stages {
					if s.Stage == "route" {
						route = s.Result
					}
				}
			}
			if res.Verdict != "forward" || res.Reason != want || !strings.Contains(route, "node "+cs[1].name) {
				t.Errorf("trace to %s: %s (%s), route %q; want forward (%s) to node %s", dst, res.Verdict, res.Reason, route, want, cs[1].name)
			}
			var before, after api.EndpointInfo
			cs[0].mustXlane(&before, "endpoint", "inspect", cs[0].ep.ID)
			if err := dial(cs[0].pod, dst, 8090, 2*time.Second); err != nil {
				t.Errorf("connect to %s:8090 on %s: %v", dst, cs[1].name, err)
			}
			cs[0].mustXlane(&after, "endpoint", "inspect", cs[0].ep.ID)
			if b, a := reason(before, want, "from_endpoint"), reason(after, want, "from_endpoint"); a.Packets <= b.Packets {
				t.Errorf("%s from %s: %d packets before the connection, %d after: the real packets took another path than the trace", want, cs[0].ep.ID, b.Packets, a.Packets)
			}
			ln.Close()
		}
	})
	t.Run("node removed and re-added", func(t *testing.T) {
		if cs[0].nodesFile != "" {
			writeNodes(t, cs[0].nodesFile, []*clusterNode{cs[0], cs[2]})
			cs[0].waitNodes(t, 2)
		} else {
			cs[0].mustXlane(nil, "node", "rm", "n2")
		}
		if out, err := inNS(cs[0].pod, "ping", "-c", "1", "-W", "1", cs[1].ip4().String()).CombinedOutput(); err == nil {
			t.Errorf("ping to a removed node's pod went through:\n%s", out)
		}
		routes := runIn(t, cs[0].netns, "ip", "route", "show", "proto", "120")
		if strings.Contains(routes, cs[1].pod4.String()) {
			t.Errorf("route to the removed node left:\n%s", routes)
		}
		// Natively routed too: the removed node's addresses fall back to
		// the cluster CIDR's entry, never to the default route.
		var ep api.EndpointInfo
		cs[0].mustXlane(&ep, "endpoint", "inspect", cs[0].ep.ID)
		if c := reason(ep, "drop_no_peer", "from_endpoint"); c.Packets == 0 {
			t.Errorf("drop_no_peer not counted for the removed node's pod; counters %+v", ep.Reasons)
		}
		if cs[0].nodesFile != "" {
			writeNodes(t, cs[0].nodesFile, cs)
			for _, c := range cs {
				c.waitNodes(t, len(cs))
			}
		} else {
			cs[0].mustXlane(nil, cs[1].addArgs()...)
		}
		ping(t, cs[0].pod, cs[1].ip4())
		ping(t, cs[0].pod, cs[1].ip6())
	})
	t.Run("service with backends on other nodes", func(t *testing.T) {
		// DNAT on the client's node, then the tunnel; the reply is
		// translated back by xlane_from_overlay's conntrack hit.
		vip4 := netip.MustParseAddrPort("10.96.0.10:8080")
		vip6 := netip.MustParseAddrPort("[fd00:96::10]:8080")
		cs[0].mustXlane(nil, "service", "create", "web4", "--vip", vip4.String(), "--backend", netip.AddrPortFrom(cs[1].ip4(), 9090).String())
		cs[0].mustXlane(nil, "service", "create", "web6", "--vip", vip6.String(), "--backend", netip.AddrPortFrom(cs[2].ip6(), 9090).String())
		transferVia(t, cs[0].pod, cs[1].pod, netip.AddrPortFrom(cs[1].ip4(), 9090), vip4, 8<<20)
		transferVia(t, cs[0].pod, cs[2].pod, netip.AddrPortFrom(cs[2].ip6(), 9090), vip6, 8<<20)
	})
	t.Run("firewall to-endpoint across nodes", func(t *testing.T) {
		// A to-endpoint rule on n2 drops TCP to port 8093 of its pod:
		// n1's pod's connections meet it on n2 (a new flow from the
		// overlay takes the Linux path to the endpoint's firewall stage,
		// pass_fw); port 8094 stays open and, once established, its flow
		// carries a checked transfer.
		cs[1].mustXlane(nil, "fw", "add", "xnode", "--direction", "to-endpoint", "--proto", "tcp", "--dport", "8093", "--action", "drop")
		defer cs[1].mustXlane(nil, "fw", "rm", "xnode")
		for _, dst := range []netip.Addr{cs[1].ip4(), cs[1].ip6()} {
			for _, port := range []uint16{8093, 8094} {
				acceptAndClose(listenIn(t, cs[1].pod, netip.AddrPortFrom(dst, port)))
			}
			if err := dial(cs[0].pod, dst, 8093, time.Second); err == nil {
				t.Errorf("n1's pod connected to %s:8093 on n2 past n2's to-endpoint drop rule", dst)
			}
			if err := dial(cs[0].pod, dst, 8094, 2*time.Second); err != nil {
				t.Errorf("n1's pod to %s:8094 on n2 (no rule): %v", dst, err)
			}
		}
		var r api.FirewallRule
		cs[1].mustXlane(&r, "fw", "get", "xnode")
		if r.Packets == 0 {
			t.Errorf("n2's rule xnode counted no packet")
		}
		// Only the flow's first packets take the Linux path (pass_fw on
		// n2's overlay device or uplink): the transfer's bytes reach the
		// pod by the fast path (fwd_peer into n2's pod).
		var before, after api.EndpointInfo
		cs[1].mustXlane(&before, "endpoint", "inspect", cs[1].ep.ID)
		transfer(t, cs[0].pod, cs[1].pod, cs[1].ip4(), 8<<20)
		cs[1].mustXlane(&after, "endpoint", "inspect", cs[1].ep.ID)
		b, a := reason(before, "fwd_peer", "to_endpoint"), reason(after, "fwd_peer", "to_endpoint")
		// (7 of the 8 MiB: the flow's first packets may take the Linux
		// path; a flow left on it would add nothing here.)
		if a.Bytes-b.Bytes < 7<<20 {
			t.Errorf("fwd_peer into n2's pod grew by %d bytes over an 8 MiB transfer with a rule set installed: its later packets did not take the fast path; counters %+v", a.Bytes-b.Bytes, after.Reasons)
		}
		t.Logf("with a rule set: fwd_peer into n2's pod +%d packets, +%d bytes over the transfer", a.Packets-b.Packets, a.Bytes-b.Bytes)
	})
	t.Run("service with one backend per node from every node", func(t *testing.T) {
		testServiceEveryNode(t, cs)
	})
	t.Run("external", func(t *testing.T) { testMultiNodeExternal(t, cs[:2], routing) })
	if routing != "vxlan" || v6Underlay {
		return
	}
	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args  []string
			field string
		}{
			{[]string{"node", "add", "n4", "--underlay", "192.168.77.4", "--pod-cidr", "10.244.1.128/25"}, "pod_cidrs"},
			{[]string{"node", "add", "n4", "--underlay", "192.168.77.2", "--pod-cidr", "10.244.4.0/24"}, "underlay"},
			{[]string{"node", "add", "n4", "--underlay", "192.168.77.1", "--pod-cidr", "10.244.4.0/24"}, "underlay"},
			{[]string{"node", "add", "n4", "--underlay", "not-an-ip", "--pod-cidr", "10.244.4.0/24"}, "underlay"},
			{[]string{"node", "add", "n4", "--underlay", "192.168.77.4", "--pod-cidr", "10.99.0.0/24"}, "pod_cidrs"},
			{[]string{"node", "add", "n4", "--underlay", "192.168.77.4"}, "pod_cidrs"},
			{[]string{"network", "create", "other", "--subnet", "10.244.3.0/24"}, "subnet"},
			// MTU mismatch: a peer whose underlay (1500) cannot carry
			// the pods' 8950-byte packets; this node's record saying
			// another MTU than its device's.
			{[]string{"node", "add", "n4", "--underlay", "192.168.77.4", "--pod-cidr", "10.244.4.0/24", "--mtu", "1500"}, "mtu"},
			{[]string{"node", "add", "n4", "--underlay", "192.168.77.4", "--pod-cidr", "10.244.4.0/24", "--mtu", "100"}, "mtu"},
		} {
			_, stderr, err := cs[0].xlane(tc.args...)
			if err == nil || !strings.Contains(stderr, tc.field) {
				t.Errorf("xlane %s: err %v, stderr %q; want an error naming %s", strings.Join(tc.args, " "), err, stderr, tc.field)
			}
		}
		var nodes []model.Node
		cs[0].mustXlane(&nodes, "node", "ls")
		if len(nodes) != 3 {
			t.Errorf("node ls after refused adds: %+v", nodes)
		}
	})
	t.Run("kill -9 and restart under TCP", func(t *testing.T) {
		wait := startTransfer(t, cs[0].pod, cs[1].pod, cs[1].ip4(), 8<<20, 4<<20)
		time.Sleep(500 * time.Millisecond)
		cs[1].stop(syscall.SIGKILL)
		time.Sleep(300 * time.Millisecond)
		cs[1].start()
		wait()
		ping(t, cs[2].pod, cs[1].ip6())
	})
	t.Run("uninstall", func(t *testing.T) {
		n := cs[2]
		// xlaned turns IPv4 forwarding on on the uplink (what its
		// programs pass to Linux for an endpoint); --uninstall puts the
		// node's value back (ul0's when it was made: its namespace's
		// default, which xlaned leaves alone).
		sysctl := func(k string) string { return strings.TrimSpace(runIn(t, n.netns, "sysctl", "-n", k)) }
		fwd := func() string { return sysctl("net.ipv4.conf.ul0.forwarding") }
		orig := sysctl("net.ipv4.conf.default.forwarding")
		if v := fwd(); v != "1" {
			t.Errorf("net.ipv4.conf.ul0.forwarding with xlaned running: %s, want 1", v)
		}
		n.stop(syscall.SIGTERM)
		args := []string{filepath.Join(binDir, "xlaned"), "--uninstall",
			"--state", filepath.Join(n.dir, "state.db"), "--socket", n.socket, "--pin-dir", n.pinDir}
		if o, err := inNS(n.netns, args...).CombinedOutput(); err != nil {
			t.Fatalf("xlaned --uninstall: %v\n%s", err, o)
		}
		if links := runIn(t, n.netns, "ip", "-o", "link", "show"); strings.Contains(links, "xlvx0") || strings.Contains(links, "xlh") {
			t.Errorf("devices left behind:\n%s", links)
		}
		for _, fam := range []string{"-4", "-6"} {
			if routes := runIn(t, n.netns, "ip", fam, "route", "show", "proto", "120"); strings.TrimSpace(routes) != "" {
				t.Errorf("peer routes left behind:\n%s", routes)
			}
		}
		if v := fwd(); v != orig {
			t.Errorf("net.ipv4.conf.ul0.forwarding after --uninstall: %s, want the node's %s back", v, orig)
		}
	})
}

// testServiceEveryNode: one service, the same on every node (each node
// programs its own from the same records), with a backend pod on every
// node; the pod of every node connects to the VIP over and over, and
// every backend answers someone (Maglev spreads the flows: 36 connections
// miss a backend with a chance of 3*(2/3)^36, ~1e-6).
func testServiceEveryNode(t *testing.T, cs []*clusterNode) {
	vip := netip.MustParseAddrPort("10.96.0.20:8080")
	args := []string{"service", "create", "each", "--vip", vip.String()}
	for _, c := range cs {
		var ep api.EndpointInfo
		srv := newNetns(t, "srv")
		c.mustXlane(&ep, "endpoint", "add", "pods", "--netns", srv)
		ln := listenIn(t, srv, netip.AddrPortFrom(ep.IPs[0], 9091))
		go func(name string) {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.Write([]byte(name))
				conn.Close()
			}
		}(c.name)
		args = append(args, "--backend", netip.AddrPortFrom(ep.IPs[0], 9091).String())
	}
	for _, c := range cs {
		c.mustXlane(nil, args...)
	}
	seen := map[string]int{}
	for _, c := range cs {
		// A kernel-mode pod's packets meet no program: no service
		// translation for them (its node's backend is reached by the
		// others).
		if c.mode == "kernel" {
			continue
		}
		for i := 0; i < 12; i++ {
			var got []byte
			err := ns.WithNetNSPath(nsPath(c.pod), func(ns.NetNS) error {
				conn, err := net.DialTimeout("tcp", vip.String(), 3*time.Second)
				if err != nil {
					return err
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(3 * time.Second))
				got, err = io.ReadAll(conn)
				return err
			})
			if err != nil || len(got) == 0 {
				t.Fatalf("from %s's pod, connection %d to %s: %v (answer %q)", c.name, i, vip, err, got)
			}
			seen[string(got)]++
		}
	}
	if len(seen) != len(cs) {
		t.Errorf("backends that answered: %v; want the one on every node", seen)
	}
	t.Run("maglev the same on every node", func(t *testing.T) { testMaglevAcrossNodes(t, cs, vip) })
	for _, c := range cs {
		c.mustXlane(nil, "service", "rm", "each")
	}
}

// maglevView is a node's Maglev table for a VIP: its size, its digest
// (xlane bpf dump maglev) and its backends by index.
type maglevView struct {
	slots, digest string
	backends      map[string]string // index -> backend
}

func maglevOf(t *testing.T, c *clusterNode, vip netip.AddrPort) maglevView {
	t.Helper()
	dump := func(name string) []map[string]any {
		var md api.MapDump
		c.mustXlane(&md, "bpf", "dump", name, "--limit", "0")
		return md.Entries
	}
	id := ""
	for _, e := range dump("services") {
		if fmt.Sprint(e["vip"]) == vip.String() {
			id = fmt.Sprint(e["id"])
		}
	}
	if id == "" {
		t.Fatalf("%s: no service %s in bpf dump services", c.name, vip)
	}
	v := maglevView{backends: map[string]string{}}
	for _, e := range dump("maglev") {
		if fmt.Sprint(e["service_id"]) == id {
			v.slots, v.digest = fmt.Sprint(e["slots"]), fmt.Sprint(e["digest"])
		}
	}
	for _, e := range dump("backends") {
		if fmt.Sprint(e["service_id"]) == id {
			v.backends[fmt.Sprint(e["index"])] = fmt.Sprint(e["backend"])
		}
	}
	if v.digest == "" || len(v.backends) == 0 {
		t.Fatalf("%s: service %s (id %s): maglev %+v", c.name, vip, id, v)
	}
	return v
}

// testMaglevAcrossNodes: every node builds the same Maglev table for the
// service from the same records (same size, digest and backend per
// index), and picks the same backend for the same flow. The same flow on
// every node: each node gets a pod with the same address in a node-local
// network (outside the cluster CIDR, the same subnet everywhere, so the
// same first address), which sends SYNs from fixed source ports to the
// VIP; each node's conntrack entry of a port says the backend its LB
// picked (whether the connection then completes does not matter).
func testMaglevAcrossNodes(t *testing.T, cs []*clusterNode, vip netip.AddrPort) {
	ref := maglevOf(t, cs[0], vip)
	for _, c := range cs[1:] {
		if v := maglevOf(t, c, vip); v.slots != ref.slots || v.digest != ref.digest || fmt.Sprint(v.backends) != fmt.Sprint(ref.backends) {
			t.Errorf("Maglev table for %s on %s: %+v; on %s: %+v", vip, c.name, v, cs[0].name, ref)
		}
	}
	const ports = 16
	picked := map[uint16]map[string]string{} // source port -> node -> backend
	var src netip.Addr
	for _, c := range cs {
		var ep api.EndpointInfo
		c.mustXlane(nil, "network", "create", "same", "--subnet", "10.99.0.0/24", "--mode", "tc", "--masquerade=false")
		client := newNetns(t, "same")
		c.mustXlane(&ep, "endpoint", "add", "same", "--netns", client)
		if src.IsValid() && ep.IPs[0] != src {
			t.Fatalf("%s: the node-local pod got %s, not %s as on the others", c.name, ep.IPs[0], src)
		}
		src = ep.IPs[0]
		// Each dial in the pod's namespace (a goroutine does not inherit
		// its parent's).
		done := make(chan error, ports)
		for p := uint16(41000); p < 41000+ports; p++ {
			go func(p uint16) {
				done <- ns.WithNetNSPath(nsPath(client), func(ns.NetNS) error {
					d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: src.AsSlice(), Port: int(p)}}
					if conn, err := d.Dial("tcp", vip.String()); err == nil {
						conn.Close()
					}
					return nil
				})
			}(p)
		}
		for range ports {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		var flows []api.Flow
		c.mustXlane(&flows, "ct", "ls", "--limit", "0")
		for _, f := range flows {
			ap, err := netip.ParseAddrPort(f.Src)
			if err != nil || ap.Addr() != src || f.Dst != vip.String() || f.NATTo == "" {
				continue
			}
			if picked[ap.Port()] == nil {
				picked[ap.Port()] = map[string]string{}
			}
			picked[ap.Port()][c.name] = f.NATTo
		}
		c.mustXlane(nil, "endpoint", "rm", ep.ID)
		c.mustXlane(nil, "network", "rm", "same")
	}
	backends := map[string]bool{}
	for p := uint16(41000); p < 41000+ports; p++ {
		if len(picked[p]) != len(cs) {
			t.Errorf("source port %d: conntrack entries on %d nodes, want %d: %v", p, len(picked[p]), len(cs), picked[p])
			continue
		}
		for _, c := range cs[1:] {
			if picked[p][c.name] != picked[p][cs[0].name] {
				t.Errorf("the flow %s:%d -> %s: %s picked %s, %s picked %s", src, p, vip, c.name, picked[p][c.name], cs[0].name, picked[p][cs[0].name])
			}
		}
		backends[picked[p][cs[0].name]] = true
	}
	// 16 flows all on one of 3 backends: (1/3)^15, the spread is real.
	if len(backends) < 2 {
		t.Errorf("16 flows all went to %v: the hash does not spread them", backends)
	}
}
