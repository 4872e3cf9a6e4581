package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/test/vlantag"
)

// VLAN networks (docs/multinode.md): n1's network "vl" is on VLAN 100 of
// its uplink, n2's "vl" (the same VNI) is not on any. On the underlay
// bridge: a host on VLAN 100 (vh), one on VLAN 300 (vw), one untagged
// (plain), all in n1's subnet. The bridge of this kernel filters no VLANs
// and there is no 802.1Q device nor tc vlan action: the hosts' tags are
// pushed and popped by a tc program of this test's own (vlanTagger).
//
//	vh (VID 100)   vw (VID 300)   plain (untagged)
//	  |              |              |
//	  +------------- br0 -----------+----+
//	  | ul0 (--uplink)                   | ul0
//	 n1: vl --vlan 100, pod1            n2: vl, pod2   (VXLAN between)
func TestMultiNodeVLAN(t *testing.T) {
	cs := newNodePair(t, "--uplink", "ul0")
	ul := cs[0].ul
	var net1 api.NetworkInfo
	cs[0].mustXlane(&net1, "network", "create", "vl", "--mode", "tc", "--vlan", "100")
	if net1.MTU != 1500 {
		t.Errorf("vlan network MTU %d, want the uplink's 1500", net1.MTU)
	}
	if out, _, err := cs[0].xlane("network", "inspect", "vl", "-o", "table"); err != nil || !strings.Contains(out, "vlan:") {
		t.Errorf("network inspect: %v, %q; want the vlan", err, out)
	}
	cs[1].mustXlane(nil, "network", "create", "vl", "--mode", "tc")
	for _, c := range cs {
		c.pod = newNetns(t, "pod")
		c.mustXlane(&c.ep, "endpoint", "add", "vl", "--netns", c.pod)
	}
	// The hosts on the underlay, in n1's subnet.
	host := func(name string, vid uint16, last byte) string {
		ns := newNetns(t, name)
		port := "v" + name
		run(t, "ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		run(t, "ip", "-n", ul, "link", "set", port, "master", "br0", "up")
		runIn(t, ns, "ip", "addr", "add", fmt.Sprintf("10.244.1.%d/24", last), "dev", "eth0")
		runIn(t, ns, "ip", "addr", "add", fmt.Sprintf("fd00:244:0:1::%x/64", last), "dev", "eth0", "nodad")
		runIn(t, ns, "ip", "link", "set", "eth0", "up")
		runIn(t, ns, "ip", "route", "add", "10.244.0.0/16", "via", "10.244.1.1")
		runIn(t, ns, "ip", "-6", "route", "add", "fd00:244::/48", "via", "fe80::1", "dev", "eth0")
		if vid != 0 {
			vlanTagger(t, ns, "eth0", vid)
		}
		return ns
	}
	vh, vw, plain := host("vh", 100, 200), host("vw", 300, 201), host("plain", 0, 202)
	// plain knows the way to pod1 (n1's MAC), as an attacker on the
	// untagged segment would; vw is left to ARP on its VLAN.
	n1MAC := strings.Fields(runIn(t, cs[0].netns, "ip", "-br", "link", "show", "ul0"))[2]
	for _, a := range []netip.Addr{cs[0].ip4(), cs[0].ip6()} {
		runIn(t, plain, "ip", "neigh", "replace", a.String(), "lladdr", n1MAC, "dev", "eth0", "nud", "permanent")
	}
	vh4, vh6 := netip.MustParseAddr("10.244.1.200"), netip.MustParseAddr("fd00:244:0:1::c8")

	t.Run("vlan host and its network's pod", func(t *testing.T) {
		ping(t, vh, cs[0].ip4())
		ping(t, vh, cs[0].ip6())
		transfer(t, vh, cs[0].pod, cs[0].ip4(), 16<<20)
		transfer(t, cs[0].pod, vh, vh6, 16<<20)
	})
	t.Run("vlan to vxlan", func(t *testing.T) {
		ping(t, vh, cs[1].ip4())
		ping(t, vh, cs[1].ip6())
		transfer(t, vh, cs[1].pod, cs[1].ip6(), 16<<20)
		transfer(t, cs[1].pod, vh, vh4, 16<<20)
	})
	t.Run("fast path used", func(t *testing.T) {
		// The VLAN's frames pass xlane's programs on n1's uplink: popped
		// (fwd_peer to the pod, fwd_overlay to n2's, fwd_vlan to Linux)
		// and pushed (fwd_vlan out of the port).
		for _, r := range []string{"fwd_peer", "fwd_overlay", "fwd_vlan"} {
			if n := uplinkCounter(t, cs[0], "ul0", r); n == 0 {
				t.Errorf("%s on n1's uplink: 0 packets", r)
			}
		}
		if n := uplinkCounter(t, cs[0], "xlvp100", "fwd_vlan"); n == 0 {
			t.Errorf("fwd_vlan on n1's VLAN port: 0 packets")
		}
	})
	t.Run("kill -9 and restart", func(t *testing.T) {
		// The port, its program and the VLAN's entries are re-made from
		// the store; its ports no network has would be removed.
		cs[0].stop(syscall.SIGKILL)
		cs[0].start()
		ping(t, vh, cs[0].ip4())
		ping(t, vh, cs[0].ip6())
		ping(t, vh, cs[1].ip4())
		transfer(t, cs[1].pod, vh, vh6, 4<<20)
	})
	t.Run("wrong or no tag", func(t *testing.T) {
		before := uplinkCounter(t, cs[0], "ul0", "drop_vlan")
		for _, ns := range []string{vw, plain} {
			for _, dst := range []netip.Addr{cs[0].ip4(), cs[0].ip6()} {
				if out, err := inNS(ns, "ping", "-c", "1", "-W", "1", dst.String()).CombinedOutput(); err == nil {
					t.Errorf("ping %s from %s (not VLAN 100) went through:\n%s", dst, ns, out)
				}
			}
		}
		// plain's are counted (untagged, for a VLAN network: drop_vlan);
		// VLAN 300 is no network's: Linux's, dropped by the kernel.
		if n := uplinkCounter(t, cs[0], "ul0", "drop_vlan"); n < before+2 {
			t.Errorf("drop_vlan on n1's uplink: %d, want at least %d", n, before+2)
		}
		// VLAN 100 reaches its network only: not n1's own addresses on
		// other networks, checked by ping to a second network's pod.
		cs[0].mustXlane(nil, "network", "create", "other", "--mode", "tc", "--subnet", "10.99.0.0/24")
		other := newNetns(t, "pod")
		var ep api.EndpointInfo
		cs[0].mustXlane(&ep, "endpoint", "add", "other", "--netns", other)
		runIn(t, vh, "ip", "route", "add", "10.99.0.0/24", "via", "10.244.1.1")
		before = uplinkCounter(t, cs[0], "ul0", "drop_vlan")
		if out, err := inNS(vh, "ping", "-c", "1", "-W", "1", ep.IPs[0].String()).CombinedOutput(); err == nil {
			t.Errorf("VLAN 100 reached another network's pod:\n%s", out)
		}
		if n := uplinkCounter(t, cs[0], "ul0", "drop_vlan"); n <= before {
			t.Errorf("drop_vlan on n1's uplink: %d, want more than %d", n, before)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, args := range [][]string{
			{"network", "create", "v2", "--mode", "tc", "--vlan", "100", "--subnet", "10.98.0.0/24"},
			{"network", "create", "v2", "--mode", "tc", "--vlan", "4095", "--subnet", "10.98.0.0/24"},
			{"network", "create", "v2", "--mode", "kernel", "--masquerade=false", "--vlan", "101", "--subnet", "10.98.0.0/24"},
		} {
			_, stderr, err := cs[0].xlane(args...)
			if err == nil || !strings.Contains(stderr, "vlan") {
				t.Errorf("xlane %s: err %v, stderr %q; want an error naming vlan", strings.Join(args, " "), err, stderr)
			}
		}
		if links := runIn(t, cs[0].netns, "ip", "-o", "link", "show"); strings.Contains(links, "xlvl101") {
			t.Errorf("a refused network left its VLAN port:\n%s", links)
		}
	})
	t.Run("network removed", func(t *testing.T) {
		cs[0].mustXlane(nil, "network", "rm", "vl", "--force")
		if links := runIn(t, cs[0].netns, "ip", "-o", "link", "show"); strings.Contains(links, "xlvl100") || strings.Contains(links, "xlvp100") {
			t.Errorf("VLAN port left behind:\n%s", links)
		}
	})
}

// newNodePair starts two nodes (VXLAN over the IPv4 underlay, each told
// about both) on an underlay bridge, with xlaned's extra flags.
func newNodePair(t *testing.T, flags ...string) []*clusterNode {
	t.Helper()
	return newNodePairEach(t, flags, flags)
}

// newNodePairEach is newNodePair with each node's own extra flags.
func newNodePairEach(t *testing.T, each ...[]string) []*clusterNode {
	t.Helper()
	ul := newNetns(t, "ul")
	runIn(t, ul, "ip", "link", "add", "br0", "type", "bridge")
	runIn(t, ul, "ip", "link", "set", "br0", "up")
	var cs []*clusterNode
	for i := 1; i <= 2; i++ {
		c := &clusterNode{ul: ul, name: fmt.Sprintf("n%d", i),
			under4: netip.MustParseAddr(fmt.Sprintf("192.168.77.%d", i)),
			under6: netip.MustParseAddr(fmt.Sprintf("fd00:77::%d", i)),
			pod4:   netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)),
			pod6:   netip.MustParsePrefix(fmt.Sprintf("fd00:244:0:%d::/64", i))}
		c.node = newNode(t, func(n *node) {
			port := fmt.Sprintf("p%d", i)
			run(t, "ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", n.netns)
			run(t, "ip", "-n", ul, "link", "set", port, "master", "br0", "up")
			runIn(t, n.netns, "ip", "addr", "add", c.under4.String()+"/24", "dev", "ul0")
			runIn(t, n.netns, "ip", "addr", "add", c.under6.String()+"/64", "dev", "ul0", "nodad")
			runIn(t, n.netns, "ip", "link", "set", "ul0", "up")
			runIn(t, n.netns, "ip", "link", "set", "lo", "up")
			n.flags = append(n.flags, "--node-name", c.name, "--cluster-cidr", "10.244.0.0/16,fd00:244::/48", "--routing", "vxlan")
			n.flags = append(n.flags, each[i-1]...)
		})
		cs = append(cs, c)
	}
	for _, c := range cs {
		for _, o := range cs {
			c.mustXlane(nil, o.addArgs()...)
		}
	}
	return cs
}

// uplinkCounter is the packets xlane_metrics holds for device and reason,
// both directions.
func uplinkCounter(t *testing.T, c *clusterNode, device, reason string) uint64 {
	t.Helper()
	out, _, err := c.xlane("bpf", "dump", "metrics", "-o", "json")
	if err != nil {
		t.Fatalf("bpf dump metrics: %v", err)
	}
	var d api.MapDump
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("bpf dump metrics: %v\n%s", err, out)
	}
	var n uint64
	for _, e := range d.Entries {
		if fmt.Sprint(e["device"]) == device && fmt.Sprint(e["reason"]) == reason {
			var p uint64
			fmt.Sscan(fmt.Sprint(e["packets"]), &p)
			n += p
		}
	}
	return n
}

// vlanTagger makes dev in netns an access port of VLAN vid
// (test/vlantag: tc programs of its own, not xlane's, so the test does
// not check xlane's tagging with itself), until the test ends.
func vlanTagger(t *testing.T, ns, dev string, vid uint16) {
	t.Helper()
	closeTagger, err := vlantag.Attach(nsPath(ns), dev, vid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTagger() })
}
