package bpf_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

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

// gen returns the live generation's header.
func (h *fwHarness) gen(tb testing.TB) bpf.FwGen {
	tb.Helper()
	var st bpf.FwState
	var g bpf.FwGen
	if err := h.objs.Firewall().State.Lookup(uint32(0), &st); err != nil {
		tb.Fatal(err)
	}
	if err := h.objs.Firewall().Gens.Lookup(st.Active&1, &g); err != nil {
		tb.Fatal(err)
	}
	return g
}

// linGen returns the live generation's fw_gen.lin.
func (h *fwHarness) linGen(tb testing.TB) uint32 { return h.gen(tb).Lin }

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
	for _, n := range []int{1, bpf.FwLinMax + 1, -(bpf.FwLinMax + 1)} {
		// 1: the list; FwLinMax+1: the IPv4 tuples; negative: the
		// bitmaps (a /24 source is not a tuple).
		rs := linRules(max(n, -n))
		if n < 0 {
			rs.Rules[len(rs.Rules)-1].Src = firewall.List{"198.51.100.0/24"}
		}
		pol := h.install(t, rs, false)
		if g := h.gen(t); (n == 1) != (g.Lin != 0) || (n == bpf.FwLinMax+1) != (g.Tuple4 != 0) {
			t.Fatalf("%d rules: fw_gen.lin %d, tuple4 %d: not the form the case is for", n, g.Lin, g.Tuple4)
		}
		// Not tracked: the first rule drops it.
		h.checkUplink(t, pol, pk, fmt.Sprintf("%d rules, untracked", n))
		// A reply of a tracked flow: established, passes uncounted.
		if err := h.objs.CT().Put(k, bpf.CTVal{Expires: ^uint64(0), Dir: 1}); err != nil {
			t.Fatal(err)
		}
		if err := h.objs.CTWritten(); err != nil {
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

// TestFirewallUplinkTuple4: a set beyond the list whose IPv4 uplink rules
// are all "protocol, /32 source, destination port" takes the tuple hash
// for IPv4 (fw_tuple4_uplink) and the bitmaps for IPv6; verdicts and
// counted rules are the reference model's, stateless and with
// established, and across swaps to and from the bitmaps and the list.
func TestFirewallUplinkTuple4(t *testing.T) {
	h := newFwHarness(t)
	sets, packets := 24, 60
	if testing.Short() {
		sets, packets = 12, 40
	}
	tuples := 0
	for seed := range sets {
		rng := rand.New(rand.NewPCG(uint64(seed)+900, 5))
		var rs *firewall.RuleSet
		switch seed % 4 {
		case 3: // not tuples: the bitmaps, then the list, between tuple sets
			rs = fwtest.RandomRuleSet(rng, 1+rng.IntN(12))
			for i := range rs.Rules {
				rs.Rules[i].Scope, rs.Rules[i].Direction, rs.Rules[i].Log = "uplink", "", 0
				if rs.Rules[i].Action == "log" {
					rs.Rules[i].Action = "drop"
				}
			}
		default:
			rs = fwtest.RandomTupleSet(rng, bpf.FwLinMax+1+rng.IntN(40))
		}
		est := seed%2 == 0
		rs.Established = &est
		pol := h.install(t, rs, false)
		g := h.gen(t)
		if g.Tuple4 != 0 {
			tuples++
		}
		what := fmt.Sprintf("seed %d, %d rules (lin %d, tuple4 %d, miss %d)", seed, len(rs.Rules), g.Lin, g.Tuple4, g.Tuple4Miss)
		for checked := 0; checked < packets; {
			pk := fwtest.RandomTuplePacket(rng)
			if linkScope(pk.Dst) || linkScope(pk.Src) || isEndpoint(pk.Dst) {
				continue
			}
			h.checkUplink(t, pol, pk, what)
			checked++
		}
	}
	if tuples < sets/2 {
		t.Fatalf("%d of %d sets took the tuples", tuples, sets)
	}
	t.Logf("%d of %d sets on the tuples", tuples, sets)
}

// setUplinkCounters gives every slot of xlane_metrics_uplink to ifindex,
// zeroed, as the daemon does for its uplink (datapath.SetUplinkCounters).
func setUplinkCounters(tb testing.TB, objs *bpf.Objects, ifindex uint32) {
	tb.Helper()
	m := objs.MetricsUplink()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		tb.Fatal(err)
	}
	vals := make([]bpf.MetricsDevVal, ncpu)
	for i := range vals {
		vals[i].Ifindex = ifindex
	}
	for r := uint32(0); r < m.MaxEntries(); r++ {
		if err := m.Put(r, vals); err != nil {
			tb.Fatal(err)
		}
	}
}

// uplinkCount sums reason's slot of xlane_metrics_uplink over the CPUs
// whose slot names ifindex.
func uplinkCount(tb testing.TB, objs *bpf.Objects, reason string, ifindex uint32) (packets, bytes uint64) {
	tb.Helper()
	for r := bpf.Reason(0); r < bpf.ReasonMax; r++ {
		if r.String() != reason {
			continue
		}
		var vals []bpf.MetricsDevVal
		if err := objs.MetricsUplink().Lookup(uint32(r), &vals); err != nil {
			tb.Fatal(err)
		}
		for _, v := range vals {
			if v.Ifindex == ifindex {
				packets += v.Packets
				bytes += v.Bytes
			}
		}
		return packets, bytes
	}
	tb.Fatalf("no reason %s", reason)
	return 0, 0
}

// TestUplinkMetricsArray: the uplink program counts its verdicts in
// xlane_metrics_uplink when the daemon gave the slots to the device it
// runs on (BPF_PROG_TEST_RUN: the test netns's lo, ifindex 1), in the
// xlane_metrics hash otherwise, never in both.
func TestUplinkMetricsArray(t *testing.T) {
	h := newFwHarness(t)
	h.install(t, linRules(1), false) // drop tcp from 203.0.113.1 to port 80
	frame, err := fwtest.Frame(firewall.Packet{Kind: firewall.KindUplink, Src: netip.MustParseAddr("203.0.113.1"),
		Dst: netip.MustParseAddr("192.0.2.1"), Proto: 6, SPort: 40000, DPort: 80, Flags: 0x10})
	if err != nil {
		t.Fatal(err)
	}
	pass, err := fwtest.Frame(firewall.Packet{Kind: firewall.KindUplink, Src: netip.MustParseAddr("203.0.113.9"),
		Dst: netip.MustParseAddr("192.0.2.1"), Proto: 6, SPort: 40000, DPort: 80, Flags: 0x10})
	if err != nil {
		t.Fatal(err)
	}
	// run: the program's return and the reason it counted in the hash
	// (emptied first), without RunVerdict, which reads only the hash.
	run := func(frame []byte) (uint32, string) {
		var k bpf.MetricsKey
		var v []bpf.MetricsVal
		var keys []bpf.MetricsKey
		it := h.objs.Metrics().Iterate()
		for it.Next(&k, &v) {
			keys = append(keys, k)
		}
		for _, k := range keys {
			h.objs.Metrics().Delete(k)
		}
		var ret uint32
		if err := h.do(func() (err error) {
			ret, err = h.objs.XDPFromUplink().Run(&ebpf.RunOptions{Data: frame})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		reason := ""
		it = h.objs.Metrics().Iterate()
		for it.Next(&k, &v) {
			reason += bpf.Reason(k.Reason).String()
		}
		return ret, reason
	}
	for _, c := range []struct {
		slots   uint32 // the device the slots are for
		inArray bool
	}{{0, false}, {1, true}, {7, false}, {1, true}} {
		setUplinkCounters(t, h.objs, c.slots)
		for _, f := range []struct {
			frame  []byte
			reason string
			ret    uint32
		}{{frame, "drop_fw", xdpDrop}, {pass, "pass_not_fwded", xdpPass}} {
			ret, reason := run(f.frame)
			if ret != f.ret {
				t.Fatalf("slots for %d, %s: return %d, want %d", c.slots, f.reason, ret, f.ret)
			}
			ap, ab := uplinkCount(t, h.objs, f.reason, c.slots)
			if c.inArray {
				if reason != "" || ap != 1 || ab != uint64(len(f.frame)) {
					t.Fatalf("slots for lo: %s counted in the hash as %q, in the array %d packets %d bytes; want the array only, 1 packet of %d bytes",
						f.reason, reason, ap, ab, len(f.frame))
				}
				setUplinkCounters(t, h.objs, c.slots) // zero for the next frame
			} else if reason != f.reason || ap != 0 {
				t.Fatalf("slots for %d: %s counted in the hash as %q, %d packets in the array; want the hash only",
					c.slots, f.reason, reason, ap)
			}
		}
	}
}

// TestFirewallUplinkMissMemory: the uplink's simple classifiers remember
// the flows they found no conntrack entry for, per slot of xlane_fw_miss
// (bpf/lib/fw_lin.h, xlane_ct_seq). A flow the datapath creates afterwards (an endpoint's
// packet, ct_create) is established on the uplink at once, in the list and
// in the IPv4 tuples, IPv4 and IPv6 (list); and one user space writes is,
// after bpf.Objects.CTWritten; the other flows remembered stay dropped.
func TestFirewallUplinkMissMemory(t *testing.T) {
	h := newFwHarness(t)
	for _, c := range []struct {
		name     string
		n        int // rules: 1 the list, FwLinMax+1 the tuples
		remote   string
		ep       string
		viaEP    bool // the flow made by the endpoint's program, else user space
		wantForm string
	}{
		{"list v4, endpoint opens", 1, "203.0.113.1", "10.1.0.2", true, "lin"},
		{"list v6, endpoint opens", 1, "2001:db8::1", "fd00:1::2", true, "lin"},
		{"tuples v4, endpoint opens", bpf.FwLinMax + 1, "203.0.113.1", "10.1.0.2", true, "tuple4"},
		{"list v4, user space writes", 1, "203.0.113.1", "10.1.0.2", false, "lin"},
		{"tuples v4, user space writes", bpf.FwLinMax + 1, "203.0.113.1", "10.1.0.2", false, "tuple4"},
	} {
		remote, ep := netip.MustParseAddr(c.remote), netip.MustParseAddr(c.ep)
		rs := linRules(c.n)
		rs.Rules[0].Src = firewall.List{c.remote + "/" + fmt.Sprint(remote.BitLen())}
		h.install(t, rs, false)
		g := h.gen(t)
		if form := map[bool]string{true: "lin", false: "tuple4"}[g.Lin != 0]; form != c.wantForm || (form == "tuple4" && g.Tuple4 == 0) {
			t.Fatalf("%s: fw_gen.lin %d, tuple4 %d: not the form the case is for", c.name, g.Lin, g.Tuple4)
		}
		in := firewall.Packet{Kind: firewall.KindUplink, Src: remote, Dst: ep, Proto: 6, SPort: 40001, DPort: 80, Flags: 0x10}
		frame, err := fwtest.Frame(in)
		if err != nil {
			t.Fatal(err)
		}
		// Four flows (source ports 40001-40004), twice each: the second
		// round is decided by the remembered misses, one slot per flow.
		var others [][]byte
		for sp := uint32(40002); sp <= 40004; sp++ {
			o := in
			o.SPort = sp
			f, err := fwtest.Frame(o)
			if err != nil {
				t.Fatal(err)
			}
			others = append(others, f)
		}
		for i := range 2 {
			for j, f := range append([][]byte{frame}, others...) {
				if refused, _, err := h.run(firewall.KindUplink, f); err != nil || !refused {
					t.Fatalf("%s: untracked packet %d of flow %d: refused %v, %v; want dropped by rule l0", c.name, i, j, refused, err)
				}
			}
		}
		var k bpf.CTKey                             // the endpoint's direction
		k.Saddr, k.Daddr = ep.As16(), remote.As16() // IPv4 as ::ffff:a.b.c.d
		k.Sport, k.Dport, k.Proto = htons(80), htons(40001), 6
		if c.viaEP {
			out := firewall.Packet{Kind: firewall.KindFromEP, Src: ep, Dst: remote, Proto: 6, SPort: 80, DPort: 40001, Flags: 0x02}
			f, err := fwtest.Frame(out)
			if err != nil {
				t.Fatal(err)
			}
			if refused, _, err := h.run(firewall.KindFromEP, f); err != nil || refused {
				t.Fatalf("%s: endpoint's packet refused %v, %v", c.name, refused, err)
			}
			var v bpf.CTVal
			if err := h.objs.CT().Lookup(&k, &v); err != nil {
				t.Fatalf("%s: the endpoint's program made no conntrack entry for %v: %v", c.name, k, err)
			}
		} else {
			if err := h.objs.CT().Put(&k, &bpf.CTVal{Expires: ^uint64(0), Dir: uint8(bpf.CTDirOrig), State: 1}); err != nil {
				t.Fatal(err)
			}
			rk := k
			rk.Saddr, rk.Daddr, rk.Sport, rk.Dport = k.Daddr, k.Saddr, k.Dport, k.Sport
			if err := h.objs.CT().Put(&rk, &bpf.CTVal{Expires: ^uint64(0), Dir: uint8(bpf.CTDirReply), State: 1}); err != nil {
				t.Fatal(err)
			}
			if err := h.objs.CTWritten(); err != nil {
				t.Fatal(err)
			}
		}
		if refused, _, err := h.run(firewall.KindUplink, frame); err != nil || refused {
			t.Fatalf("%s: reply of the flow the endpoint opened: refused %v, %v; want passed (established)", c.name, refused, err)
		}
		for j, f := range others {
			if refused, _, err := h.run(firewall.KindUplink, f); err != nil || !refused {
				t.Fatalf("%s: untracked flow %d after the creation: refused %v, %v; want dropped by rule l0", c.name, j+1, refused, err)
			}
		}
		var keys []bpf.CTKey
		var ck bpf.CTKey
		var cv bpf.CTVal
		for it := h.objs.CT().Iterate(); it.Next(&ck, &cv); {
			keys = append(keys, ck)
		}
		for i := range keys {
			if err := h.objs.CT().Delete(&keys[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFirewallUplinkTupleMemory: each CPU remembers the last IPv4 tuple
// and what its lookup gave, under the generation (fw_tuple4_uplink). The
// same packet, twice per set, across swaps between sets that decide its
// tuple differently (drop, allow, reject, no tuple, no tuple but a
// default) and the firewall turned off and on: verdict and counted rule
// are the reference model's every time, stateless and with established.
func TestFirewallUplinkTupleMemory(t *testing.T) {
	h := newFwHarness(t)
	pk := firewall.Packet{Kind: firewall.KindUplink, Src: netip.MustParseAddr("203.0.113.1"),
		Dst: netip.MustParseAddr("192.0.2.1"), Proto: 6, SPort: 40002, DPort: 80, Flags: 0x10}
	sets := map[string]func() *firewall.RuleSet{
		"drop": func() *firewall.RuleSet { return linRules(bpf.FwLinMax + 1) },
		"allow": func() *firewall.RuleSet {
			rs := linRules(bpf.FwLinMax + 1)
			rs.Rules[0].Action = "allow"
			return rs
		},
		"reject": func() *firewall.RuleSet {
			rs := linRules(bpf.FwLinMax + 1)
			rs.Rules[0].Action = "reject"
			return rs
		},
		"later rule": func() *firewall.RuleSet { // the tuple at bit 4, not 0
			rs := linRules(bpf.FwLinMax + 1)
			rs.Rules[0].Src = firewall.List{"203.0.113.200/32"}
			rs.Rules[4].Src, rs.Rules[4].DstPort = firewall.List{"203.0.113.1/32"}, firewall.List{"80"}
			return rs
		},
		"no tuple": func() *firewall.RuleSet {
			rs := linRules(bpf.FwLinMax + 1)
			rs.Rules[0].DstPort = firewall.List{"81"}
			return rs
		},
	}
	order := []string{"drop", "allow", "drop", "reject", "later rule", "no tuple", "drop", "off", "drop", "allow"}
	for _, est := range []bool{false, true} {
		for _, name := range order {
			if name == "off" {
				if err := h.in.Disable(); err != nil {
					t.Fatal(err)
				}
				frame, err := fwtest.Frame(pk)
				if err != nil {
					t.Fatal(err)
				}
				if refused, _, err := h.run(firewall.KindUplink, frame); err != nil || refused {
					t.Fatalf("firewall off: refused %v, %v", refused, err)
				}
				continue
			}
			rs := sets[name]()
			rs.Established = &est
			pol := h.install(t, rs, false)
			if g := h.gen(t); g.Tuple4 == 0 {
				t.Fatalf("%s: fw_gen.tuple4 0: not the tuples", name)
			}
			for i := range 2 {
				h.checkUplink(t, pol, pk, fmt.Sprintf("established %v, set %q, packet %d", est, name, i))
			}
		}
	}
}
