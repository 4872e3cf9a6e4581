package observe

import (
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
)

// A service's backends are counted by state, and its tracked flows by the
// backend the DNAT entry sends them to; flows to another VIP, port or
// protocol are not the service's.
func TestServiceCounts(t *testing.T) {
	vip := netip.MustParseAddrPort("10.96.0.10:80")
	b1, b2 := netip.MustParseAddrPort("10.0.0.2:8080"), netip.MustParseAddrPort("10.0.0.3:8080")
	svcs := []model.Service{{Name: "web", VIP: vip, Proto: "tcp", Backends: []model.Backend{{Addr: b1, Weight: 1}, {Addr: b2, Weight: 0}}}}
	dnat := map[datapath.DNATFlow]int{
		{Proto: 6, Dst: vip, Target: b1}:                                       3,
		{Proto: 6, Dst: vip, Target: b2}:                                       1, // draining: its established flows stay
		{Proto: 17, Dst: vip, Target: b1}:                                      5, // udp: another service
		{Proto: 6, Dst: netip.MustParseAddrPort("192.0.2.1:8081"), Target: b1}: 7, // a published port
	}
	counts, flows := serviceCounts(svcs, dnat)
	if len(counts) != 1 || counts[0].Active != 1 || counts[0].Draining != 1 {
		t.Errorf("counts %+v", counts)
	}
	want := map[string]int{b1.String(): 3, b2.String(): 1}
	if len(flows) != 2 {
		t.Fatalf("flows %+v", flows)
	}
	for _, f := range flows {
		if f.Service != "web" || f.Flows != want[f.Backend] {
			t.Errorf("flow %+v, want %d", f, want[f.Backend])
		}
	}
}
