package e2e

import (
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestUplinkGenericNAT: masquerade through an uplink whose XDP program is
// attached in generic mode (a driver without native XDP): the replies XDP
// passes reach the tc program behind it with their MAC header, which
// translates them back. With the xdp.frags program in generic mode the
// kernel's copy of the skb lost mac_len, the tc program saw the replies
// from their IP header on and passed them untranslated: no ping came back
// (issue 11).
func TestUplinkGenericNAT(t *testing.T) {
	var out string
	n := newNode(t, withOutsideRoutes(&out, "1500", false), func(n *node) { n.flags = append(n.flags, "--uplink-xdp-mode", "generic") })
	n.mustXlane(nil, "network", "create", "nat", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--mode", "tc")
	c := newNetns(t, "c")
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "nat", "--netns", c)
	var st api.Status
	n.mustXlane(&st, "status")
	if st.UplinkXDPMode != "generic" {
		t.Fatalf("uplink XDP mode %q, want generic", st.UplinkXDPMode)
	}
	o4, o6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:83::1")
	ping(t, c, o4)
	ping(t, c, o6)
	transfer(t, c, out, o4, bulk/4)
	transfer(t, c, out, o6, bulk/4)
}
