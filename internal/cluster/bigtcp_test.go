package cluster

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

// TestBigTCPOff: --big-tcp auto stays off for a cluster network whose
// traffic to other nodes cannot carry BIG TCP aggregates (the overlay; an
// uplink with 64 KiB GSO: lo has 65536), and is left to the calibration
// for a node-local network and a daemon that runs alone. bench/peers
// found it on with vxlan routing: 0.16x Cilium across nodes.
func TestBigTCPOff(t *testing.T) {
	inCluster := &model.Network{Name: "pods", Subnets: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:0:1::/64")}}
	local := &model.Network{Name: "local", Subnets: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}}
	base := Config{NodeName: "n1", ClusterCIDRs: []string{"10.244.0.0/16", "fd00:244::/56"}}
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
		n    *model.Network
		want string // substring; "" means not off
	}{
		{"vxlan routing", func(*Config) {}, inCluster, "VXLAN overlay"},
		{"vxlan routing, node-local network", func(*Config) {}, local, ""},
		{"native routing, 64 KiB uplink", func(c *Config) { c.Routing, c.Uplink = "native", "lo" }, inCluster, "uplink lo, which sends GSO packets of at most 65536 bytes"},
		{"native routing, no uplink named", func(c *Config) { c.Routing = "native" }, inCluster, ""},
		{"alone", func(c *Config) { *c = Config{} }, inCluster, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			c, err := New(nil, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := c.BigTCPOff(tc.n)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("BigTCPOff = %q, want %q", got, tc.want)
			}
		})
	}
}
