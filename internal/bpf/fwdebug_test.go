package bpf_test

import (
	"github.com/cilium/ebpf"
	"fmt"
	"github.com/xlane-dev/xlane/internal/bpf"
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

func TestFwDebug(t *testing.T) {
	h := newFwHarness(t)
	for _, rs := range []*firewall.RuleSet{
		{Rules: []firewall.Rule{{Name: "a", Action: "drop"}}},
		{Rules: []firewall.Rule{{Name: "a", Action: "drop", Proto: firewall.List{"tcp"}}}},
		{Rules: []firewall.Rule{{Name: "a", Action: "drop", Dst: firewall.List{"10.1.0.0/30"}}}},
		{Rules: []firewall.Rule{{Name: "a", Action: "drop", DstPort: firewall.List{"1000"}, Proto: firewall.List{"tcp"}}}},
		{Rules: []firewall.Rule{{Name: "a", Action: "drop", TCPFlags: "RST/RST", Proto: firewall.List{"tcp"}}}},
	} {
		h.install(t, rs, true)
		st, _ := h.in.State()
		t.Logf("state %+v", st)
		var id ebpf.MapID
		if err := h.objs.Firewall().Exact.Lookup(st.Active, &id); err != nil {
			t.Fatalf("outer lookup: %v", err)
		}
		im, err := ebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		var k bpf.FwExactKey
		var v uint32
		it2 := im.Iterate()
		for it2.Next(&k, &v) {
			t.Logf("exact %+v -> %d", k, v)
		}
		t.Logf("iter err %v; info %v", it2.Err(), im)
		for _, k := range []firewall.Kind{firewall.KindFromEP, firewall.KindUplink} {
			pk := firewall.Packet{Kind: k, Net: 1, Src: netip.MustParseAddr("10.1.0.2"), Dst: netip.MustParseAddr("198.51.100.2"), Proto: 6, SPort: 444, DPort: 1000, Flags: 4}
			frame, _ := fwtest.Frame(pk)
			d, err := h.run(k, frame)
			c, _ := h.in.Counter(0)
			var mk bpf.MetricsKey
			var mv []bpf.MetricsVal
			it := h.objs.Metrics().Iterate()
			var ms []string
			for it.Next(&mk, &mv) {
				ms = append(ms, fmt.Sprintf("%d/%s/%d", mk.Ifindex, bpf.Reason(mk.Reason), mv[0].Packets+mv[1].Packets))
			}
			t.Logf("%s dropped %v err %v events %v counter %+v metrics %v", k, d, err, h.drain(t), c, ms)
		}
		pk := firewall.Packet{Kind: firewall.KindToEP, Net: 1, Src: netip.MustParseAddr("198.51.100.2"), Dst: netip.MustParseAddr("10.1.0.2"), Proto: 6, SPort: 444, DPort: 1000, Flags: 4}
		frame, _ := fwtest.Frame(pk)
		d, err := h.run(firewall.KindToEP, frame)
		t.Logf("%+v: dropped %v err %v events %v", rs.Rules[0], d, err, h.drain(t))
	}
}
