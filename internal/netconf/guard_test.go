package netconf

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

// On a node of a cluster, the kernel-mode guard accepts the cluster's
// pods (other nodes') before it drops unsolicited traffic to the subnets;
// alone, it has no such line.
func TestGuardScriptCluster(t *testing.T) {
	n := &model.Network{ID: 7, Mode: model.ModeKernel,
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24"), netip.MustParsePrefix("fd00:244:0:3::/64")}}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")}
	s := guardScript(n, cluster)
	for _, want := range []string{"ip saddr 10.244.0.0/16 accept", "ip6 saddr fd00:244::/48 accept"} {
		i, drop := strings.Index(s, want), strings.Index(s, "counter drop")
		if i < 0 || drop < 0 || i > drop {
			t.Errorf("script lacks %q before the drop:\n%s", want, s)
		}
	}
	if s := guardScript(n, nil); strings.Contains(s, "saddr") {
		t.Errorf("a lone node's guard accepts by source:\n%s", s)
	}
}
