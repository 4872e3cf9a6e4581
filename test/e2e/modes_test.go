package e2e

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

var bulk = bulkSize(100 << 20) // bytes per checked TCP transfer (kernel_test.go)

//	 node netns (xlaned)                          container netns
//	+----------------------------------------+
//	| lo: 10.77.0.1, fd00:77::1 (gateway)    |    +------------+
//	| xlhAAAA ------------------------------------|eth0 .2 ::2 | c1
//	| xlhBBBB ------------------------------------|eth0 .3 ::3 | c2
//	| xlhCCCC ------------------------------------|eth0 .4 ::4 | c3
//	+----------------------------------------+    +------------+
//
// Every mode: three endpoints, IPv4 and IPv6 ping between all of them and to
// the gateway, 100 MB TCP transfers checked by SHA-256 (container to
// container both families, container to the node), the same after kill -9
// of the daemon and after its restart, then removal leaving nothing behind.
func TestDatapathModes(t *testing.T) {
	for _, mode := range []string{"kernel", "tc", "xdp", "xdp-generic"} {
		t.Run(mode, func(t *testing.T) { testMode(t, mode) })
	}
}

func testMode(t *testing.T, mode string) {
	n := newNode(t)
	requireMode(t, n, mode) // kernel_test.go
	var net api.NetworkInfo
	n.mustXlane(&net, "network", "create", "blue", "--subnet", "10.77.0.0/24", "--subnet", "fd00:77::/64", "--mode", mode)
	if string(net.Mode) != mode {
		t.Fatalf("network mode = %q, want %q", net.Mode, mode)
	}
	var cs []string
	var eps []api.EndpointInfo
	for i := 0; i < 3; i++ {
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "blue", "--netns", c)
		if len(ep.IPs) != 2 || ep.State != "ready" {
			t.Fatalf("endpoint %d: ips %v state %q, want an IPv4 and an IPv6 address, ready", i, ep.IPs, ep.State)
		}
		cs, eps = append(cs, c), append(eps, ep)
	}
	v4 := func(i int) netip.Addr { return eps[i].IPs[0] }
	v6 := func(i int) netip.Addr { return eps[i].IPs[1] }
	gw4, gw6 := netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("fd00:77::1")

	t.Run("connectivity", func(t *testing.T) {
		for i := range cs {
			for j := range cs {
				if i != j {
					ping(t, cs[i], v4(j))
					ping(t, cs[i], v6(j))
				}
			}
			ping(t, cs[i], gw4)
			ping(t, cs[i], gw6)
		}
	})
	t.Run("tcp", func(t *testing.T) {
		transfer(t, cs[0], cs[2], v4(2), bulk)
		transfer(t, cs[1], cs[0], v6(0), bulk)
		transfer(t, cs[2], n.netns, gw4, bulk)
		transfer(t, cs[0], n.netns, gw6, bulk/4)
	})
	if mode != "kernel" {
		t.Run("fast path used", func(t *testing.T) {
			var ep api.EndpointInfo
			n.mustXlane(&ep, "endpoint", "inspect", eps[0].ID)
			// The bulk transfer to c3 is on the fast path: redirected by
			// XDP, or (generic XDP: GSO packets bigger than the MTU) by
			// the tc program behind it. Counting packets is not enough:
			// the ACKs of the transfer into c1 alone pass for "1000
			// packets" (issue 11: 872 of them made a flaky failure while
			// every data byte went through Linux).
			if c := reason(ep, "fwd_peer", "from_endpoint"); c.Bytes < uint64(bulk) {
				t.Errorf("fwd_peer from %s = %d packets, %d bytes, want the %d-byte transfer on the fast path; counters %+v", eps[0].ID, c.Packets, c.Bytes, bulk, ep.Reasons)
			}
			// Only ARP is not IP. Under generic XDP the tc program once
			// saw every frame XDP passed from its IP header on (the
			// kernel's copy of the skb for an xdp.frags program loses
			// mac_len): data counted as pass_non_ip.
			if c := reason(ep, "pass_non_ip", "from_endpoint"); c.Bytes > 64<<10 {
				t.Errorf("pass_non_ip from %s = %d packets, %d bytes, want ARP only; counters %+v", eps[0].ID, c.Packets, c.Bytes, ep.Reasons)
			}
			noDrops(t, ep)
		})
	}
	t.Run("survives kill -9", func(t *testing.T) {
		n.stop(syscall.SIGKILL)
		ping(t, cs[0], v4(1))
		ping(t, cs[1], v6(2))
		transfer(t, cs[1], cs[2], v4(2), bulk)
	})
	t.Run("restart reconciles", func(t *testing.T) {
		n.start()
		var got []api.EndpointInfo
		n.mustXlane(&got, "endpoint", "ls")
		if len(got) != 3 {
			t.Fatalf("after restart: %d endpoints, want 3", len(got))
		}
		for _, e := range got {
			if e.State != "ready" {
				t.Errorf("endpoint %s state %q after restart, want ready", e.ID, e.State)
			}
		}
		// Every endpoint has its programs again: on 6.1 (legacy tc)
		// only the endpoint attached last had its pins before
		// (datapath/legacytc.go), which "ready" did not show.
		var st api.Status
		n.mustXlane(&st, "status")
		if h := st.Health; h == nil || len(h.Programs.Missing) > 0 || (mode != "kernel" && h.Programs.Attached == 0) {
			t.Errorf("programs after restart: %+v, want every endpoint's", st.Health)
		}
		// Leases survived: a new endpoint gets a fresh address.
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "blue", "--netns", c)
		for _, e := range eps {
			for _, a := range e.IPs {
				if ep.IPs[0] == a || ep.IPs[1] == a {
					t.Fatalf("new endpoint got %v, already leased to %s", a, e.ID)
				}
			}
		}
		ping(t, c, v4(0))
		transfer(t, cs[0], cs[1], v4(1), bulk)
		n.mustXlane(nil, "endpoint", "rm", ep.ID)
	})
	t.Run("remove leaves nothing", func(t *testing.T) {
		for _, e := range eps {
			n.mustXlane(nil, "endpoint", "rm", e.ID)
		}
		n.mustXlane(nil, "network", "rm", "blue")
		assertClean(t, n)
	})
}

// noDrops fails the test for every drop counter of ep that is not zero.
func noDrops(t *testing.T, ep api.EndpointInfo) {
	t.Helper()
	for _, r := range ep.Reasons {
		if r.Drop && r.Packets > 0 {
			t.Errorf("drop counter %s = %d, want 0", r.Reason, r.Packets)
		}
	}
}

func reason(ep api.EndpointInfo, name, dir string) model.Counter {
	for _, r := range ep.Reasons {
		if r.Reason == name && r.Direction == dir {
			return r.Counter
		}
	}
	return model.Counter{}
}

// assertClean checks that the node has no xlane device, route, gateway
// address or pinned link left.
func assertClean(t *testing.T, n *node) {
	t.Helper()
	links := runIn(t, n.netns, "ip", "-o", "link", "show")
	if strings.Contains(links, "xlh") || strings.Contains(links, "xlc") {
		t.Errorf("veths left behind:\n%s", links)
	}
	for _, fam := range []string{"-4", "-6"} {
		routes := runIn(t, n.netns, "ip", fam, "route", "show", "table", "all")
		if strings.Contains(routes, "10.77.") || strings.Contains(routes, "fd00:77") {
			t.Errorf("routes left behind (%s):\n%s", fam, routes)
		}
	}
	addrs := runIn(t, n.netns, "ip", "addr", "show", "dev", "lo")
	if strings.Contains(addrs, "10.77.") || strings.Contains(addrs, "fd00:77") {
		t.Errorf("gateway addresses left on lo:\n%s", addrs)
	}
	ents, err := os.ReadDir(n.pinDir + "/links")
	if err == nil && len(ents) > 0 {
		t.Errorf("pinned links left: %v", ents)
	}
	if out, _ := exec.Command("bpftool", "map", "dump", "pinned", n.pinDir+"/maps/xlane_endpoints").CombinedOutput(); strings.Contains(string(out), "key") {
		t.Errorf("endpoint map entries left:\n%s", out)
	}
}
