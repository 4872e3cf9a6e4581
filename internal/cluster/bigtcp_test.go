package cluster

import (
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xlane-dev/xlane/internal/model"
)

// TestBigTCPOff: --big-tcp auto stays off for a cluster network whose
// traffic to other nodes cannot carry BIG TCP aggregates (the overlay; an
// uplink with 64 KiB GSO), per family: a native uplink set up for BIG TCP
// in one family (IPv4: gso_ipv4_max_size, IPv6: gso_max_size, which the
// kernel keeps apart above 64 KiB) lets that family's aggregates through
// and no other's; it is left to the calibration for a node-local network
// and a daemon that runs alone. bench/peers found it on with vxlan
// routing (0.16x Cilium across nodes); the uplink's IPv6 limit used to
// decide for both families, so an uplink raised for IPv6 only let IPv4
// aggregates be segmented at the uplink, and one raised for IPv4 only (as
// `ip link set DEV gso_ipv4_max_size N` does) kept IPv4 BIG TCP off.
func TestBigTCPOff(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("creates veths in a network namespace of its own: run as root (make test does)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // and enters it
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	defer netns.Set(orig)
	// Uplinks: a veth at its defaults (64 KiB) and veths raised as an
	// operator sets a NIC up for BIG TCP, in one family or both.
	for _, u := range []struct {
		name      string
		gso4, gso int
	}{{"up64k", 0, 0}, {"up4", 196608, 0}, {"up6", 0, 196608}, {"up46", 196608, 196608}} {
		l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: u.name}, PeerName: u.name + "p"}
		if err := netlink.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
		if u.gso != 0 {
			if err := netlink.LinkSetGSOMaxSize(l, u.gso); err != nil {
				t.Fatal(err)
			}
		}
		if u.gso4 != 0 {
			if err := netlink.LinkSetGSOIPv4MaxSize(l, u.gso4); err != nil {
				t.Fatal(err)
			}
		}
	}
	inCluster := &model.Network{Name: "pods", Subnets: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:0:1::/64")}}
	local := &model.Network{Name: "local", Subnets: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}}
	base := Config{NodeName: "n1", ClusterCIDRs: []string{"10.244.0.0/16", "fd00:244::/56"}}
	native := func(uplink string) func(c *Config) {
		return func(c *Config) { c.Routing, c.Uplink = "native", uplink }
	}
	const (
		raise64 = "which sends GSO packets of at most 65536 bytes"
		// a veth takes up to 512 KiB less 8 (tso_max_size): the reason says
		// how to set it up.
		hint4 = "it takes up to 524280 (tso_max_size): `ip link set up64k gso_ipv4_max_size 196608 gro_ipv4_max_size 196608`"
	)
	for _, tc := range []struct {
		name         string
		mod          func(c *Config)
		n            *model.Network
		want4, want6 string // substrings; "" means not off
	}{
		{"vxlan routing", func(*Config) {}, inCluster, "VXLAN overlay", "VXLAN overlay"},
		{"vxlan routing, node-local network", func(*Config) {}, local, "", ""},
		{"native routing, 64 KiB uplink", native("up64k"), inCluster, raise64 + " (its gso_ipv4_max_size); " + hint4, raise64 + " (its gso_max_size)"},
		{"native routing, uplink raised for IPv4", native("up4"), inCluster, "", "uplink up4, " + raise64 + " (its gso_max_size)"},
		{"native routing, uplink raised for IPv6", native("up6"), inCluster, "uplink up6, " + raise64 + " (its gso_ipv4_max_size)", ""},
		{"native routing, uplink raised for both", native("up46"), inCluster, "", ""},
		{"native routing, no uplink named", func(c *Config) { c.Routing = "native" }, inCluster, "", ""},
		{"alone", func(c *Config) { *c = Config{} }, inCluster, "", ""},
	} {
		// Not t.Run: a subtest's goroutine would leave this thread's
		// namespace, where the uplinks are.
		cfg := base
		tc.mod(&cfg)
		c, err := New(nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got4, got6 := c.BigTCPOff(tc.n)
		for _, g := range []struct{ fam, got, want string }{{"IPv4", got4, tc.want4}, {"IPv6", got6, tc.want6}} {
			if (g.want == "") != (g.got == "") || !strings.Contains(g.got, g.want) {
				t.Errorf("%s: BigTCPOff %s = %q, want %q", tc.name, g.fam, g.got, g.want)
			}
		}
	}
}
