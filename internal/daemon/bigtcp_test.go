package daemon

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
)

// --big-tcp on turns BIG TCP on per family where the kernel has it: on
// 6.1 (IPv6 BIG TCP, no IPv4 before 6.3) a dual-stack network gets IPv6
// only and its reason says why IPv4 is off; before, its create was
// refused (TestRestartWhateverEndpointState failed on the 6.1 leg). Only
// a network none of whose families can have it is refused, naming the
// field.
func TestBigTCPOnPerFamily(t *testing.T) {
	kernel := func(v4 bool) *features.Set {
		return &features.Set{Kernel: "6.1-test", Features: []features.Feature{
			{Name: features.BigTCPv6, Available: true, Since: "6.1"},
			{Name: features.BigTCPv4, Available: v4, Since: "6.12", Detail: "gso_ipv4_max_size reads back 0"},
		}}
	}
	v4, v6 := netip.MustParsePrefix("10.57.0.0/24"), netip.MustParsePrefix("fd00:57::/64")
	for _, tc := range []struct {
		name         string
		v4Kernel     bool
		subnets      []netip.Prefix
		want4, want6 bool
		reason, err  string // substrings; err "" means no error
	}{
		{"dual stack, kernel has both", true, []netip.Prefix{v4, v6}, true, true, "on: asked for", ""},
		{"dual stack, kernel lacks ipv4", false, []netip.Prefix{v4, v6}, false, true, "ipv4 off: kernel 6.1-test lacks big-tcp-ipv4", ""},
		{"ipv6 only, kernel lacks ipv4", false, []netip.Prefix{v6}, false, true, "on: asked for", ""},
		{"ipv4 only, kernel lacks ipv4", false, []netip.Prefix{v4}, false, false, "", "big_tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Daemon{feat: kernel(tc.v4Kernel)}
			n := &model.Network{Name: "n", Subnets: tc.subnets}
			for _, p := range tc.subnets {
				n.Gateways = append(n.Gateways, p.Addr().Next())
			}
			err := d.resolveBigTCP(n, "on")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "big-tcp-ipv4") {
					t.Fatalf("err %v, want one naming %s and big-tcp-ipv4", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.BigTCP4 != tc.want4 || n.BigTCP6 != tc.want6 || !strings.Contains(n.BigTCPReason, tc.reason) {
				t.Errorf("v4 %v v6 %v (%q), want v4 %v v6 %v with %q", n.BigTCP4, n.BigTCP6, n.BigTCPReason, tc.want4, tc.want6, tc.reason)
			}
		})
	}
}
