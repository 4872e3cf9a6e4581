package bpf_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// The uplink's list classifier (bpf/lib/fw_lin.h): a set whose uplink
// rules fit bpf.FwLinMax conjunctions is tried in order from the
// generation; one more conjunction and the bitmaps decide. Both must give
// the reference model's verdict and count the model's rule, across the
// boundary and across generation swaps between the two forms.

// counts returns every rule slot's packet counter, summed over CPUs.
func (h *fwHarness) counts(tb testing.TB, n int) []uint64 {
	tb.Helper()
	out := make([]uint64, n)
	for i := range out {
		var v []bpf.FwCounter
		if err := h.objs.Firewall().Counters.Lookup(uint32(i), &v); err != nil {
			tb.Fatalf("counter %d: %v", i, err)
		}
		for _, c := range v {
			out[i] += c.Packets
		}
	}
	return out
}

// linGen returns the live generation's fw_gen.lin.
func (h *fwHarness) linGen(tb testing.TB) uint32 {
	tb.Helper()
	var st bpf.FwState
	var g bpf.FwGen
	if err := h.objs.Firewall().State.Lookup(uint32(0), &st); err != nil {
		tb.Fatal(err)
	}
	if err := h.objs.Firewall().Gens.Lookup(st.Active&1, &g); err != nil {
		tb.Fatal(err)
	}
	return g.Lin
}

// checkUplink runs pk through the uplink program and compares the verdict
// and the counted rule with the model's.
func (h *fwHarness) checkUplink(tb testing.TB, pol *firewall.Policy, pk firewall.Packet, what string) (decided bool) {
	tb.Helper()
	frame, err := fwtest.Frame(pk)
	if err != nil {
		tb.Fatal(err)
	}
	before := h.counts(tb, len(pol.Rules))
	refused, _, err := h.run(firewall.KindUplink, frame)
	if err != nil {
		tb.Fatalf("run: %v", err)
	}
	after := h.counts(tb, len(pol.Rules))
	want, _ := pol.Evaluate(pk)
	got := -1
	for i := range after {
		if after[i] != before[i] {
			if got >= 0 {
				tb.Fatalf("%s: packet %+v counted by rules %d and %d", what, pk, got, i)
			}
			got = i
		}
	}
	wantRefused := want >= 0 && pol.Rules[want].Action != bpf.FwAllow
	if got != want || refused != wantRefused {
		tb.Fatalf("%s: packet %+v: datapath rule %d refused %v, model rule %d refused %v",
			what, pk, got, refused, want, wantRefused)
	}
	return want >= 0
}

// linRules is n uplink rules, each "ACTION tcp from 203.0.113.(i+1)/32 to
// port 80+i", actions cycling through drop, allow, reject.
func linRules(n int) *firewall.RuleSet {
	rs := &firewall.RuleSet{}
	for i := range n {
		rs.Rules = append(rs.Rules, firewall.Rule{
			Name: fmt.Sprintf("l%d", i), Scope: "uplink", Action: []string{"drop", "allow", "reject"}[i%3],
			Proto: firewall.List{"tcp"}, Src: firewall.List{fmt.Sprintf("203.0.113.%d/32", i+1)},
			DstPort: firewall.List{fmt.Sprint(80 + i)},
		})
	}
	return rs
}

func TestFirewallUplinkList(t *testing.T) {
	h := newFwHarness(t)
	// The boundary: FwLinMax single-value rules take the list, one more
	// the bitmaps; swap between the two forms and back.
	for _, n := range []int{bpf.FwLinMax, bpf.FwLinMax + 1, bpf.FwLinMax, 1, bpf.FwLinMax + 1} {
		pol := h.install(t, linRules(n), false)
		wantLin := uint32(n + 1)
		if n > bpf.FwLinMax {
			wantLin = 0
		}
		if got := h.linGen(t); got != wantLin {
			t.Fatalf("%d rules: fw_gen.lin %d, want %d", n, got, wantLin)
		}
		what := fmt.Sprintf("%d rules (lin %d)", n, wantLin)
		for i := range n + 1 {
			src := netip.MustParseAddr(fmt.Sprintf("203.0.113.%d", i+1))
			for _, dport := range []uint32{uint32(80 + i), uint32(81 + i)} {
				pk := firewall.Packet{Kind: firewall.KindUplink, Src: src, Dst: netip.MustParseAddr("192.0.2.1"),
					Proto: 6, SPort: 40000, DPort: dport, Flags: 0x10}
				h.checkUplink(t, pol, pk, what)
				pk.Proto = 17 // no rule for UDP: FW_CLASS_NONE in the bitmaps
				h.checkUplink(t, pol, pk, what)
			}
		}
	}

	// Random uplink sets without log rules or sampling (the list emits no
	// events, so the counters name the deciding rule), stateless and with
	// established (an empty conntrack: decided alike).
	lists, bitmaps := 0, 0
	sets, packets := 30, 40
	if testing.Short() {
		sets, packets = 16, 25
	}
	for seed := range sets {
		rng := rand.New(rand.NewPCG(uint64(seed)+700, 3))
		rs := fwtest.RandomRuleSet(rng, 1+rng.IntN(6))
		for i := range rs.Rules {
			rs.Rules[i].Scope = "uplink"
			rs.Rules[i].Direction = ""
			rs.Rules[i].Log = 0
			if rs.Rules[i].Action == "log" {
				rs.Rules[i].Action = "drop"
			}
		}
		est := seed%2 == 0
		rs.Established = &est
		pol := h.install(t, rs, false)
		what := fmt.Sprintf("seed %d, %d rules (lin %d)", seed, len(rs.Rules), h.linGen(t))
		if h.linGen(t) != 0 {
			lists++
		} else {
			bitmaps++
		}
		for checked := 0; checked < packets; {
			pk := fwtest.RandomPacket(rng, firewall.KindUplink)
			if linkScope(pk.Dst) || linkScope(pk.Src) || isEndpoint(pk.Dst) {
				continue
			}
			h.checkUplink(t, pol, pk, what)
			checked++
		}
	}
	if lists < sets/4 || bitmaps < 2 {
		t.Fatalf("random sets: %d used the list, %d the bitmaps; want both", lists, bitmaps)
	}
	t.Logf("random sets: %d on the list, %d on the bitmaps", lists, bitmaps)
}

// TestFirewallUplinkEstablishedLate: with established on, the uplink asks
// conntrack only once a rule matched (the list, and the bitmaps of a set
// without log rules); a packet of an established flow still passes before
// the rule, uncounted, in both forms.
func TestFirewallUplinkEstablishedLate(t *testing.T) {
	h := newFwHarness(t)
	src, dst := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("192.0.2.1")
	pk := firewall.Packet{Kind: firewall.KindUplink, Src: src, Dst: dst, Proto: 6, SPort: 40000, DPort: 80, Flags: 0x10}
	var k bpf.CTKey
	s16, d16 := src.As16(), dst.As16()
	k.Saddr, k.Daddr = s16, d16
	k.Sport, k.Dport, k.Proto = htons(40000), htons(80), 6
	for _, n := range []int{1, bpf.FwLinMax + 1} {
		pol := h.install(t, linRules(n), false)
		// Not tracked: the first rule drops it.
		h.checkUplink(t, pol, pk, fmt.Sprintf("%d rules, untracked", n))
		// A reply of a tracked flow: established, passes uncounted.
		if err := h.objs.CT().Put(k, bpf.CTVal{Expires: ^uint64(0), Dir: 1}); err != nil {
			t.Fatal(err)
		}
		frame, err := fwtest.Frame(pk)
		if err != nil {
			t.Fatal(err)
		}
		before := h.counts(t, len(pol.Rules))
		refused, _, err := h.run(firewall.KindUplink, frame)
		if err != nil {
			t.Fatal(err)
		}
		if after := h.counts(t, len(pol.Rules)); refused || after[0] != before[0] {
			t.Fatalf("%d rules (lin %d): established packet refused %v, rule counted %d -> %d",
				n, h.linGen(t), refused, before[0], after[0])
		}
		if err := h.objs.CT().Delete(k); err != nil {
			t.Fatal(err)
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
