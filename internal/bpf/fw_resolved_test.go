package bpf_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// TestFirewallResolved: a rule with dst_names (fw_rule.resolved) through
// the from-endpoint program: it matches only a destination its source
// resolved (an entry of xlane_fw_resolved under the rule's slot, for
// that source) whose TTL has not ended; otherwise the search goes on to
// the drop after it. The reference model (Policy.Resolved over the same
// entries) agrees on every case.
func TestFirewallResolved(t *testing.T) {
	h := newFwHarness(t)
	pol := h.install(t, &rules.RuleSet{Rules: []rules.Rule{
		{Name: "names", Priority: 10, Direction: "from-endpoint", Proto: rules.List{"tcp"}, DstNames: rules.List{"*.example.com"}, Action: "allow"},
		{Name: "log", Priority: 15, Direction: "from-endpoint", Action: "log"},
		{Name: "deny", Priority: 20, Direction: "from-endpoint", Action: "drop"},
	}}, true)
	if len(h.tab.Resolved) != 1 || h.tab.Resolved[0].Slot != 0 || fmt.Sprint(h.tab.Resolved[0].Names) != "[*.example.com]" {
		t.Fatalf("tables' resolved rules: %+v", h.tab.Resolved)
	}
	m := h.in.Resolved()
	var now unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
	live, ended := uint64(now.Nano())+uint64(time.Minute), uint64(now.Nano())-1
	a := netip.MustParseAddr
	src4, src6, other := fwtest.Endpoints["b1"].Addrs[0], fwtest.Endpoints["b1"].Addrs[1], fwtest.Endpoints["b2"].Addrs[0]
	api4, api6, old4 := a("93.184.215.14"), a("2001:db8::14"), a("198.51.100.9")
	entries := map[[3]string]uint64{}
	put := func(slot uint32, src, dst netip.Addr, exp uint64) {
		if err := m.Put(slot, src, dst, exp); err != nil {
			t.Fatal(err)
		}
		entries[[3]string{fmt.Sprint(slot), src.String(), dst.String()}] = exp
	}
	put(0, src4, api4, live)
	put(0, src6, api6, live)
	put(0, src4, old4, ended) // its TTL ended
	put(7, other, api4, live) // another rule's slot
	pol.Resolved = func(i int, src, dst netip.Addr) bool {
		return entries[[3]string{"0", src.String(), dst.String()}] == live && pol.Rules[i].Name == "names"
	}
	for _, c := range []struct {
		name     string
		src, dst netip.Addr
		proto    uint8
		want     string
	}{
		{"resolved", src4, api4, 6, "names"},
		{"resolved, IPv6", src6, api6, 6, "names"},
		{"not resolved", src4, a("203.0.113.1"), 6, "deny"},
		{"resolved by another endpoint", other, api4, 6, "deny"},
		{"TTL ended", src4, old4, 6, "deny"},
		{"resolved, another protocol", src4, api4, 17, "deny"},
	} {
		pk := firewall.Packet{Kind: firewall.KindFromEP, Net: 1, Src: c.src, Dst: c.dst, Proto: c.proto, SPort: 40000, DPort: 443, Flags: 0x02}
		ref, _ := pol.Evaluate(pk)
		if pol.Rules[ref].Name != c.want {
			t.Errorf("%s: the reference decides %s, want %s", c.name, pol.Rules[ref].Name, c.want)
		}
		frame, err := fwtest.Frame(pk)
		if err != nil {
			t.Fatal(err)
		}
		dropped, _, err := h.run(firewall.KindFromEP, frame)
		if err != nil {
			t.Fatal(err)
		}
		// The events: the log rule's when the names did not match, and
		// the deciding rule's.
		want := "[0]"
		if c.want == "deny" {
			want = "[1 2]"
		}
		if got := fmt.Sprint(h.drain(t)); got != want || dropped != (c.want == "deny") {
			t.Errorf("%s: events of slots %s, dropped %v; want %s, dropped %v", c.name, got, dropped, want, c.want == "deny")
		}
	}
}
