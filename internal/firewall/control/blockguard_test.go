package control

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
)

// TestBlockGuard: the uplink blocklist refuses prefixes that would cut the
// node off (a whole family, its addresses, its gateway, peer nodes, the
// cluster CIDR), naming the field and the value, and takes the rest.
func TestBlockGuard(t *testing.T) {
	g := &blockGuard{
		addrs: []netconf.Landmark{
			{Addr: netip.MustParseAddr("192.0.2.2"), What: "the node's address 192.0.2.2 (dev up0)"},
			{Addr: netip.MustParseAddr("fe80::1"), What: "the node's address fe80::1 (dev up0)"},
			{Addr: netip.MustParseAddr("192.0.2.1"), What: "the node's default gateway 192.0.2.1 (dev up0)"},
			{Addr: netip.MustParseAddr("203.0.113.9"), What: `node "b"'s underlay address 203.0.113.9`},
		},
		cidrs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	}
	for _, tc := range []struct{ prefix, says string }{
		{"0.0.0.0/0", "every source"},
		{"::/0", "every source"},
		{"192.0.0.0/8", "the node's address 192.0.2.2"},
		{"192.0.2.1/32", "default gateway"},
		{"fe80::/10", "fe80::1"},
		{"203.0.113.0/24", `node "b"`},
		{"10.0.0.0/8", "cluster CIDR 10.244.0.0/16"},
		{"10.244.0.0/16", "cluster CIDR"},
	} {
		err := g.check("add[0]", netip.MustParsePrefix(tc.prefix))
		var fe *model.FieldError
		if !errors.As(err, &fe) || fe.Field != "add[0]" || !strings.Contains(err.Error(), tc.prefix) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("block %s: %v, want an error of add[0] naming it and %q", tc.prefix, err, tc.says)
		}
	}
	for _, ok := range []string{"198.51.100.0/24", "192.0.2.3/32", "10.244.3.0/24", "2001:db8::/32", "11.0.0.0/8"} {
		if err := g.check("add[0]", netip.MustParsePrefix(ok)); err != nil {
			t.Errorf("block %s: %v, want it taken", ok, err)
		}
	}
}
