package bpf_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// TestFirewallReopenedFlowIsNew: with established on, a bare SYN from a
// flow's originator whose entry is closing or closed (the client reused
// its port: ct_reopens) is a new connection, judged by the rules, as
// Linux's conntrack makes it NEW; any other packet of that entry, and a
// SYN on an entry not finished, passes as established. On the uplink
// (conntrack asked after the search: the list, the IPv4 tuples, the
// bitmaps) and from an endpoint (asked before it, fw_prepare).
func TestFirewallReopenedFlowIsNew(t *testing.T) {
	h := newFwHarness(t)
	est := true
	cases := []struct {
		state   bpf.CTState
		flags   uint8
		refused bool
	}{
		{bpf.CTClosed, 0x02, true},       // SYN: reopens, the rule drops it
		{bpf.CTClosing, 0x02, true},      // SYN after one FIN: reopens too
		{bpf.CTClosed, 0x10, false},      // ACK: the old flow's, established
		{bpf.CTClosed, 0x12, false},      // SYN-ACK: not a new connection
		{bpf.CTEstablished, 0x02, false}, // SYN on a live flow: not reopened
	}
	run := func(t *testing.T, pk firewall.Packet, what string) {
		t.Helper()
		s16, d16 := pk.Src.As16(), pk.Dst.As16()
		k := bpf.CTKey{Saddr: s16, Daddr: d16, Sport: htons(uint16(pk.SPort)), Dport: htons(uint16(pk.DPort)), Proto: 6}
		for _, c := range cases {
			if err := h.objs.CT().Put(k, bpf.CTVal{Expires: ^uint64(0), Dir: uint8(bpf.CTDirOrig), State: uint8(c.state)}); err != nil {
				t.Fatal(err)
			}
			if err := h.objs.CTWritten(); err != nil {
				t.Fatal(err)
			}
			pk.Flags = c.flags
			frame, err := fwtest.Frame(pk)
			if err != nil {
				t.Fatal(err)
			}
			refused, _, err := h.run(pk.Kind, frame)
			if err != nil {
				t.Fatal(err)
			}
			if refused != c.refused {
				t.Errorf("%s: flags %#x on an original entry in state %d: refused %v, want %v", what, c.flags, c.state, refused, c.refused)
			}
			// The stages after the firewall may have forgotten it.
			h.objs.CT().Delete(k)
		}
	}
	src, dst := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("192.0.2.1")
	up := firewall.Packet{Kind: firewall.KindUplink, Src: src, Dst: dst, Proto: 6, SPort: 40000, DPort: 80}
	for _, n := range []int{1, bpf.FwLinMax + 1, -(bpf.FwLinMax + 1)} {
		rs := linRules(max(n, -n)) // rule 0 drops up
		if n < 0 {
			rs.Rules[len(rs.Rules)-1].Src = firewall.List{"198.51.100.0/24"}
		}
		rs.Established = &est
		h.install(t, rs, false)
		run(t, up, fmt.Sprintf("uplink, %d rules", n))
	}
	rs := &firewall.RuleSet{Established: &est, Rules: []firewall.Rule{
		{Name: "no-80", Action: "drop", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"80"}},
	}}
	h.install(t, rs, false)
	ep := fwtest.Endpoints["b1"].Addrs[0]
	run(t, firewall.Packet{Kind: firewall.KindFromEP, Net: fwtest.Endpoints["b1"].Network, Src: ep, Dst: dst, Proto: 6, SPort: 40000, DPort: 80}, "from an endpoint")
}
