package bpf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netns"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/bpf/bpftest"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// Firewall tests: the classifier of bpf/lib/fw.h run with
// BPF_PROG_TEST_RUN through the programs that call it, against the
// reference model of internal/firewall.
//
//	from-endpoint: xlane_from_endpoint (tcx ingress of a host veth)
//	to-endpoint:   xlane_to_endpoint   (tcx egress of a host veth)
//	uplink:        xlane_xdp_from_uplink
//
// Runs happen in a private network namespace where every endpoint of
// fwtest's node is registered on loopback, the device of context-less
// runs; no route leaves it, so allowed packets end as a pass to Linux.

const (
	tcShot     = 2 // TC_ACT_SHOT
	tcRedirect = 7 // TC_ACT_REDIRECT
	xdpDrop    = 1 // XDP_DROP
	xdpPass    = 2 // XDP_PASS
	xdpTX      = 3 // XDP_TX
)

type fwHarness struct {
	objs   *bpf.Objects
	net    *bpftest.NS
	ns     netns.NsHandle // net's handle
	in     *firewall.Installer
	events *ringbuf.Reader
	tab    *firewall.Tables // the last installed
}

func newFwHarness(tb testing.TB) *fwHarness {
	tb.Helper()
	return newFwHarnessFrom(tb, "")
}

// newFwHarnessFrom is newFwHarness with the objects of dir (bpf.ObjectsFor).
func newFwHarnessFrom(tb testing.TB, dir string) *fwHarness {
	tb.Helper()
	ns := bpftest.NewNS(tb) // skips unless root
	objs := bpf.ObjectsFor(tb, dir)
	// The harness drives the XDP programs too: skipped (or failed, per
	// the kernel matrix) where the verifier refuses them.
	features.RequireMode(tb, "xdp", objs.XDPErr())
	h := &fwHarness{objs: objs, net: ns, ns: ns.Handle()}
	var err error
	for id, ep := range fwtest.Endpoints {
		// No endpoint MAC (as netkit in L3 mode has none): the rules
		// classify any source MAC, which anti-spoofing (its own tests)
		// would otherwise refuse first.
		mac, _ := net.ParseMAC("02:00:00:0a:00:01")
		val := bpf.NewEndpointVal(1, ep.Network, make(net.HardwareAddr, 6), mac, 1500, false)
		for _, a := range ep.Addrs {
			if err := objs.Endpoints().Put(bpf.KeyFromAddr(a), val); err != nil {
				tb.Fatalf("seed endpoint %s: %v", id, err)
			}
		}
	}
	if h.in, err = firewall.NewInstaller(objs.Firewall()); err != nil {
		tb.Fatal(err)
	}
	if h.events, err = ringbuf.NewReader(objs.Firewall().Events); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.events.Close() })
	return h
}

// do runs fn on a thread inside the test netns (bpftest.NS.Do).
func (h *fwHarness) do(fn func() error) error { return h.net.Do(fn) }

// install validates, compiles and installs rs; every rule logs every hit,
// so the events name the deciding rule. Slot i is rule i of the policy.
func (h *fwHarness) install(tb testing.TB, rs *firewall.RuleSet, logAll bool) *firewall.Policy {
	tb.Helper()
	pol, err := firewall.Validate(rs, fwtest.Resolver())
	if err != nil {
		tb.Fatalf("validate: %v", err)
	}
	slots := map[string]uint32{}
	for i := range pol.Rules {
		slots[pol.Rules[i].Name] = uint32(i)
		if logAll {
			pol.Rules[i].Sample = 1
		}
		h.in.ResetCounter(uint32(i))
	}
	tab, err := firewall.Compile(pol, slots)
	if err != nil {
		tb.Fatalf("compile: %v", err)
	}
	if _, err := h.in.Install(tab); err != nil {
		tb.Fatalf("install: %v", err)
	}
	h.tab = tab
	return pol
}

// run feeds frame to the program of kind k and reports whether the
// program refused it (dropped it, or sent back a reject's RST), with the
// frame it left.
func (h *fwHarness) run(k firewall.Kind, frame []byte) (refused bool, out []byte, err error) {
	var prog *ebpf.Program
	pass := uint32(0xffffffff) // TC_ACT_UNSPEC: the stages let it go on
	switch k {
	case firewall.KindFromEP:
		prog = h.objs.FromEndpoint()
	case firewall.KindToEP:
		prog = h.objs.ToEndpoint()
	default:
		prog, pass = h.objs.XDPFromUplink(), xdpPass
	}
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := bpf.RunVerdict(h.do, prog, h.objs.Metrics(), opts)
	return ret != pass, opts.DataOut, err
}

// drain returns the slots of the events since the last call.
func (h *fwHarness) drain(tb testing.TB) []int {
	tb.Helper()
	var out []int
	for {
		h.events.SetDeadline(time.Now())
		rec, err := h.events.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			tb.Fatalf("read events: %v", err)
		}
		var e bpf.FwEvent
		if len(rec.RawSample) < 8 {
			tb.Fatalf("short event")
		}
		e.Slot = uint32(rec.RawSample[8]) | uint32(rec.RawSample[9])<<8 | uint32(rec.RawSample[10])<<16 | uint32(rec.RawSample[11])<<24
		out = append(out, int(e.Slot))
	}
}

// linkScope mirrors parse.h: destinations Linux handles before the
// firewall, and sources the anti-spoofing stage drops.
func linkScope(a netip.Addr) bool {
	return a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() ||
		(a.Is4() && (a.As4()[0] == 0 || a.As4()[0] >= 224))
}

func isEndpoint(a netip.Addr) bool {
	for _, e := range fwtest.Endpoints {
		for _, x := range e.Addrs {
			if x == a {
				return true
			}
		}
	}
	return false
}

// TestFirewallDifferential: random rule sets up to 2,000 rules, random
// packets through the three hooks; the rule that decides (and the log
// rules on the way), read from the event ring, and the verdict must be
// the reference model's.
func TestFirewallDifferential(t *testing.T) {
	sizes := []int{1, 1, 2, 2, 3, 5, 5, 10, 10, 20, 50, 200, 1000, 2000}
	packets := 400
	if testing.Short() {
		sizes, packets = []int{1, 10, 200}, 100
	}
	newFwHarness(t).differential(t, fwtest.RandomRuleSet, 100, sizes, packets)
}

// TestFirewallPass: the differential on tiered sets with pass rules
// (fwtest.RandomTieredRuleSet): a pass rule moves the search past its
// tier's later rules (fw_pass), once or twice per packet, within a word
// and across words, as the reference model does.
func TestFirewallPass(t *testing.T) {
	sizes := []int{2, 5, 10, 20, 50, 200, 1000, 2000}
	packets := 400
	if testing.Short() {
		sizes, packets = []int{10, 200}, 100
	}
	newFwHarness(t).differential(t, fwtest.RandomTieredRuleSet, 300, sizes, packets)
}

// TestFirewallPassTable: fwtest.PassTiers through the to-endpoint
// program (tcx egress): the rule that decides each packet, read from the
// event ring (none for a pass rule: it decides nothing), and the verdict;
// a pass rule's counter counts the packets it passed on.
func TestFirewallPassTable(t *testing.T) {
	h := newFwHarness(t)
	rs, cases := fwtest.PassTiers()
	pol := h.install(t, rs, true)
	h.drain(t)
	slot := map[string]int{}
	for i, r := range pol.Rules {
		slot[r.Name] = i
	}
	for _, tc := range cases {
		frame, err := fwtest.Frame(tc.Packet(firewall.KindToEP))
		if err != nil {
			t.Fatal(err)
		}
		dropped, _, err := h.run(firewall.KindToEP, frame)
		if err != nil {
			t.Fatal(err)
		}
		want := []int(nil)
		if tc.Want != "" {
			want = []int{slot[tc.Want]}
		}
		if got := h.drain(t); fmt.Sprint(got) != fmt.Sprint(want) || dropped != (tc.Want != "" && tc.Want != "np-allow-22") {
			t.Errorf("%s -> :%d: events of slots %v, dropped %v; want %s (slot %v)", tc.Src, tc.DPort, got, dropped, tc.Want, want)
		}
	}
	// admin-pass-web passed the three packets to port 80 on; base-pass-80
	// the one from 10.1/16.
	for name, want := range map[string]uint64{"admin-pass-web": 3, "base-pass-80": 1} {
		c, err := h.in.Counter(uint32(slot[name]))
		if err != nil {
			t.Fatal(err)
		}
		if c.Packets != want {
			t.Errorf("%s counted %d packets, want %d", name, c.Packets, want)
		}
	}
}

// differential installs a set of every size from gen and checks random
// packets through the three hooks against the reference model: the
// deciding rule and the log rules on the way (the event ring) and the
// verdict.
func (h *fwHarness) differential(t *testing.T, gen func(*rand.Rand, int) *firewall.RuleSet, seed0 uint64, sizes []int, packets int) {
	for seed, n := range sizes {
		rng := rand.New(rand.NewPCG(uint64(seed)+seed0, uint64(n)))
		rs := gen(rng, n)
		pol := h.install(t, rs, true)
		h.drain(t)
		checked, decided, drops, logs := 0, 0, 0, 0
		for checked < packets {
			k := []firewall.Kind{firewall.KindFromEP, firewall.KindToEP, firewall.KindUplink}[rng.IntN(3)]
			pk := fwtest.RandomPacket(rng, k)
			if linkScope(pk.Dst) || linkScope(pk.Src) || (k == firewall.KindUplink && isEndpoint(pk.Dst)) {
				continue
			}
			frame, err := fwtest.Frame(pk)
			if err != nil {
				t.Fatal(err)
			}
			dropped, _, err := h.run(k, frame)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			got := h.drain(t)
			want, wantLog := pol.Evaluate(pk)
			wantSlots := append([]int(nil), wantLog...)
			wantDrop := false
			if want >= 0 {
				wantSlots = append(wantSlots, want)
				wantDrop = pol.Rules[want].Action != bpf.FwAllow
			}
			if fmt.Sprint(got) != fmt.Sprint(wantSlots) || dropped != wantDrop {
				desc := "(no rule)"
				if want >= 0 {
					desc = fmt.Sprintf("%s %+v", pol.Rules[want].Name, pol.Rules[want])
				}
				bit, _ := h.tab.Classify(pk)
				var passes []string
				for b, r := range h.tab.Rules {
					if r.Action == bpf.FwPass {
						passes = append(passes, fmt.Sprintf("bit %d (rule %d) -> %d", b, h.tab.Bit[b], r.Sample))
					}
				}
				t.Fatalf("%d rules, %s packet %+v:\n\tdatapath: rules %v, dropped %v\n\treference: rules %v, dropped %v: %s\n\ttables: bit %d; pass bits %v",
					n, k, pk, got, dropped, wantSlots, wantDrop, desc, bit, passes)
			}
			checked++
			if want >= 0 {
				decided++
			}
			if wantDrop {
				drops++
			}
			logs += len(wantLog)
		}
		passes := 0
		for _, r := range pol.Rules {
			if r.Action == bpf.FwPass {
				passes++
			}
		}
		t.Logf("%d rules (%d in the policy, %d pass): %d packets agree (%d decided by a rule, %d dropped, %d log hits)",
			n, len(pol.Rules), passes, checked, decided, drops, logs)
	}
}

// runUplink runs the uplink's XDP program on frame and returns its verdict
// and the reason it counted (read from xlane_metrics, reset first).
func (h *fwHarness) runUplink(tb testing.TB, frame []byte) (uint32, string) {
	tb.Helper()
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
	ret, err := bpf.RunVerdict(h.do, h.objs.XDPFromUplink(), h.objs.Metrics(), &ebpf.RunOptions{Data: frame})
	if err != nil {
		tb.Fatalf("run uplink program: %v", err)
	}
	reason := ""
	it = h.objs.Metrics().Iterate()
	for it.Next(&k, &v) {
		reason = bpf.Reason(k.Reason).String()
	}
	return ret, reason
}

func tcpFrame(tb testing.TB, src, dst string, flags uint8) []byte {
	tb.Helper()
	f, err := fwtest.Frame(firewall.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		Proto: 6, SPort: 40000, DPort: 80, Flags: flags})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestFirewallUplinkClass: the uplink's hook class comes from the
// generation (fw_gen.any_class[FW_F_CTX]: class + 1), not from a hash
// lookup; a set without uplink rules says so (FW_CTX_NO_UPLINK), and a
// generation that says nothing (0, as before the field was used) falls
// back to the lookup. Every form decides alike.
func TestFirewallUplinkClass(t *testing.T) {
	h := newFwHarness(t)
	dropped, passed := tcpFrame(t, "203.0.113.5", "192.0.2.1", 0x10), tcpFrame(t, "203.0.113.6", "192.0.2.1", 0x10)
	gen := func() (uint32, bpf.FwGen) {
		var st bpf.FwState
		var g bpf.FwGen
		if err := h.objs.Firewall().State.Lookup(uint32(0), &st); err != nil {
			t.Fatal(err)
		}
		if err := h.objs.Firewall().Gens.Lookup(st.Active&1, &g); err != nil {
			t.Fatal(err)
		}
		return st.Active & 1, g
	}
	check := func(what string, frame []byte, want uint32) {
		t.Helper()
		if ret, reason := h.runUplink(t, frame); ret != want {
			t.Errorf("%s: return %d (%s), want %d", what, ret, reason, want)
		}
	}
	h.install(t, &firewall.RuleSet{Rules: []firewall.Rule{
		{Name: "to-ep", Action: "drop", Direction: "to-endpoint", Proto: firewall.List{"tcp"}},
		{Name: "up", Action: "drop", Scope: "uplink", Src: firewall.List{"203.0.113.5/32"}},
	}}, false)
	slot, g := gen()
	if c := g.AnyClass[bpf.FwFieldCtx]; c == 0 || c == bpf.FwCtxNoUplink {
		t.Fatalf("uplink class in the generation: %#x, want class + 1", c)
	}
	check("class from the generation, rule source", dropped, xdpDrop)
	check("class from the generation, other source", passed, xdpPass)
	g.AnyClass[bpf.FwFieldCtx] = 0
	if err := h.objs.Firewall().Gens.Put(slot, &g); err != nil {
		t.Fatal(err)
	}
	check("class looked up, rule source", dropped, xdpDrop)
	check("class looked up, other source", passed, xdpPass)

	h.install(t, &firewall.RuleSet{Rules: []firewall.Rule{
		{Name: "to-ep", Action: "drop", Direction: "to-endpoint", Proto: firewall.List{"tcp"}},
	}}, false)
	if _, g := gen(); g.AnyClass[bpf.FwFieldCtx] != bpf.FwCtxNoUplink {
		t.Fatalf("no uplink rule: generation says %#x, want FW_CTX_NO_UPLINK", g.AnyClass[bpf.FwFieldCtx])
	}
	check("no uplink rule", dropped, xdpPass)
}

// TestFirewallBlocklist: a million IPv4 prefixes and some IPv6 ones in
// the uplink's LPM blocklists; blocked sources are dropped first thing,
// the others pass.
func TestFirewallBlocklist(t *testing.T) {
	h := newFwHarness(t)
	n := 1_000_000
	if testing.Short() {
		n = 50_000
	}
	rng := rand.New(rand.NewPCG(7, 7))
	ps := make([]netip.Prefix, 0, n+2)
	for len(ps) < n {
		a := [4]byte{byte(rng.IntN(223) + 1), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}
		if a[0] == 10 {
			continue // keep 10/8 for the sources that pass
		}
		bits := 24 + rng.IntN(9)
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4(a), bits).Masked())
	}
	ps = append(ps, netip.MustParsePrefix("10.66.0.0/16"), netip.MustParsePrefix("2001:db8:bad::/48"))
	begin := time.Now()
	if err := h.in.Block(ps); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d prefixes loaded in %v", len(ps), time.Since(begin).Round(time.Millisecond))
	if err := h.in.SetDDoS(bpf.FwDdos{Flags: bpf.FwDdosBlocklist}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		src     string
		dropped bool
	}{
		{"10.66.3.4", true}, {"10.67.3.4", false}, {ps[0].Addr().String(), true}, {ps[n/2].Addr().String(), true},
		{"2001:db8:bad::1", true}, {"2001:db8:bae::1", false},
	} {
		dst := "192.0.2.1"
		if strings.Contains(c.src, ":") {
			dst = "2001:db8::1"
		}
		ret, reason := h.runUplink(t, tcpFrame(t, c.src, dst, 0x02))
		if (ret == xdpDrop) != c.dropped || (c.dropped && reason != "drop_blocklist") {
			t.Errorf("source %s: verdict %d reason %s, want dropped=%v (drop_blocklist)", c.src, ret, reason, c.dropped)
		}
	}
	if err := h.in.Unblock(ps[:1]); err != nil {
		t.Fatal(err)
	}
	if ret, _ := h.runUplink(t, tcpFrame(t, ps[0].Addr().String(), "192.0.2.1", 0x02)); ret == xdpDrop && ps[0].Bits() == 32 {
		t.Errorf("%s dropped after unblock", ps[0])
	}
}

// TestFirewallRateLimit: per-source token buckets (packets, SYNs) and
// the malformed-header drop on the uplink.
func TestFirewallRateLimit(t *testing.T) {
	h := newFwHarness(t)
	if err := h.in.SetDDoS(bpf.FwDdos{Flags: bpf.FwDdosRate | bpf.FwDdosSYN | bpf.FwDdosMalformed,
		Pps: 1, Burst: 5, SynPps: 1, SynBurst: 2, V4Prefix: 24, V6Prefix: 64}); err != nil {
		t.Fatal(err)
	}
	count := func(src string, flags uint8, n int) (passed int, reasons map[string]int) {
		reasons = map[string]int{}
		for i := 0; i < n; i++ {
			ret, reason := h.runUplink(t, tcpFrame(t, src, "192.0.2.1", flags))
			if ret != xdpDrop {
				passed++
			}
			reasons[reason]++
		}
		return
	}
	// A 1/s bucket of 5: five of ten ACKs pass within the test's instant.
	if p, rs := count("198.51.100.7", 0x10, 10); p != 5 || rs["drop_rate_limit"] != 5 {
		t.Errorf("ACKs from one source: %d of 10 passed (%v), want 5 and 5 drop_rate_limit", p, rs)
	}
	// The same /24 shares the bucket; another /24 has its own.
	if p, _ := count("198.51.100.8", 0x10, 1); p != 0 {
		t.Errorf("a source of the same /24 passed: the bucket is per /24")
	}
	// SYN bucket of 2 (with packets left in the packet bucket).
	if p, rs := count("203.0.113.9", 0x02, 4); p != 2 || rs["drop_syn_limit"] != 2 {
		t.Errorf("SYNs: %d of 4 passed (%v), want 2 and 2 drop_syn_limit", p, rs)
	}
	// Malformed: SYN+FIN, no flags, a TCP header cut short.
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"SYN+FIN", tcpFrame(t, "192.0.2.50", "192.0.2.1", 0x03)},
		{"null scan", tcpFrame(t, "192.0.2.51", "192.0.2.1", 0x00)},
		{"TCP header cut", func() []byte {
			f := tcpFrame(t, "192.0.2.52", "192.0.2.1", 0x10)
			f = f[:14+20+10]
			f[16], f[17] = 0, 30 // IPv4 total length: 30 bytes
			return f
		}()},
	} {
		if ret, reason := h.runUplink(t, c.frame); ret != xdpDrop || reason != "drop_malformed" {
			t.Errorf("%s: verdict %d reason %s, want drop_malformed", c.name, ret, reason)
		}
	}
}

// firewallRules makes n uplink rules "drop tcp from a /32 to port p" that
// a benchmark packet does not match, and optionally a last rule it does.
func firewallRules(n int, lastMatches bool) *firewall.RuleSet {
	rs := &firewall.RuleSet{}
	for i := 0; i < n; i++ {
		rs.Rules = append(rs.Rules, firewall.Rule{
			Name: fmt.Sprintf("r%d", i), Scope: "uplink", Action: "drop", Proto: firewall.List{"tcp"},
			Src:     firewall.List{fmt.Sprintf("198.18.%d.%d", i/250%250, i%250+1)},
			DstPort: firewall.List{fmt.Sprint(1000 + i%5000)},
		})
	}
	if lastMatches && n > 0 {
		rs.Rules[n-1].Src = firewall.List{"203.0.113.0/24"}
		rs.Rules[n-1].DstPort = firewall.List{"80"}
	}
	return rs
}

// BenchmarkFirewall measures the uplink program per packet with 1, 1,000
// and 10,000 rules: a packet no rule matches (classified, passed) and one
// the last rule drops, against the firewall off. docs/firewall.md has the
// numbers.
func BenchmarkFirewall(b *testing.B) {
	h := newFwHarness(b)
	frame := tcpFrame(b, "203.0.113.5", "192.0.2.1", 0x10)
	run := func(b *testing.B) {
		var d time.Duration
		err := h.do(func() (err error) {
			_, d, err = h.objs.XDPFromUplink().Benchmark(frame, b.N, b.ResetTimer)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
	}
	b.Run("off", func(b *testing.B) {
		if err := h.in.Disable(); err != nil {
			b.Fatal(err)
		}
		run(b)
	})
	for _, n := range []int{1, 1000, 10000} {
		for _, last := range []bool{false, true} {
			for _, est := range []bool{true, false} {
				name := fmt.Sprintf("rules=%d/pass", n)
				if last {
					name = fmt.Sprintf("rules=%d/drop-by-last", n)
				}
				if !est {
					name += "/stateless"
				}
				b.Run(name, func(b *testing.B) {
					rs := firewallRules(n, last)
					rs.Established = &est
					h.install(b, rs, false)
					run(b)
				})
			}
		}
	}
}

// TestFirewallReject: a rejected TCP segment comes back as the RST that
// answers it (RFC 9293), with valid checksums, out of every hook.
func TestFirewallReject(t *testing.T) {
	h := newFwHarness(t)
	h.install(t, &firewall.RuleSet{Rules: []firewall.Rule{
		{Name: "no-8080", Action: "reject", Proto: firewall.List{"tcp", "udp"}, DstPort: firewall.List{"8080"}},
		{Name: "up-8080", Action: "reject", Scope: "uplink", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"8080"}},
	}}, false)
	for _, c := range []struct {
		kind     firewall.Kind
		src, dst string
		ret      uint32
	}{
		{firewall.KindFromEP, "10.1.0.2", "192.0.2.9", tcRedirect},
		{firewall.KindFromEP, "fd00:1::2", "2001:db8::9", tcRedirect},
		{firewall.KindToEP, "192.0.2.9", "10.1.0.2", tcRedirect},
		{firewall.KindUplink, "192.0.2.9", "198.51.100.1", xdpTX},
		{firewall.KindUplink, "2001:db8::9", "2001:db8::1", xdpTX},
	} {
		for _, flags := range []uint8{0x02, 0x18} { // SYN; PSH+ACK with data
			pk := firewall.Packet{Kind: c.kind, Src: netip.MustParseAddr(c.src), Dst: netip.MustParseAddr(c.dst),
				Proto: 6, SPort: 40000, DPort: 8080, Flags: flags,
				SMAC: [6]byte{2, 0, 0, 0, 0, 1}, DMAC: [6]byte{2, 0, 0, 0, 0, 2}}
			frame, err := fwtest.Frame(pk)
			if err != nil {
				t.Fatal(err)
			}
			var prog *ebpf.Program
			switch c.kind {
			case firewall.KindFromEP:
				prog = h.objs.FromEndpoint()
			case firewall.KindToEP:
				prog = h.objs.ToEndpoint()
			default:
				prog = h.objs.XDPFromUplink()
			}
			opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
			ret, err := bpf.RunVerdict(h.do, prog, h.objs.Metrics(), opts)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%s %s->%s flags %#x", c.kind, c.src, c.dst, flags)
			if ret != c.ret {
				t.Errorf("%s: return %d, want %d", name, ret, c.ret)
				continue
			}
			checkRST(t, name, frame, opts.DataOut)
		}
	}
}

// TestFirewallRejectICMP: a rejected UDP datagram (or ICMP query) comes
// back as an ICMP port unreachable quoting it, out of every hook; ICMP
// errors, multicast and broadcast are dropped without an answer.
func TestFirewallRejectICMP(t *testing.T) {
	h := newFwHarness(t)
	h.install(t, &firewall.RuleSet{Rules: []firewall.Rule{
		{Name: "no-8080", Action: "reject", Proto: firewall.List{"udp"}, DstPort: firewall.List{"8080"}},
		{Name: "no-icmp", Action: "reject", Proto: firewall.List{"icmp"}},
		{Name: "no-icmpv6", Action: "reject", Proto: firewall.List{"icmpv6"}},
		{Name: "up-8080", Action: "reject", Scope: "uplink", Proto: firewall.List{"udp"}, DstPort: firewall.List{"8080"}},
		{Name: "up-icmp", Action: "reject", Scope: "uplink", Proto: firewall.List{"icmp"}},
		{Name: "up-icmpv6", Action: "reject", Scope: "uplink", Proto: firewall.List{"icmpv6"}},
	}}, false)
	progs := map[firewall.Kind]*ebpf.Program{
		firewall.KindFromEP: h.objs.FromEndpoint(), firewall.KindToEP: h.objs.ToEndpoint(),
		firewall.KindUplink: h.objs.XDPFromUplink(),
	}
	run := func(k firewall.Kind, frame []byte) (uint32, []byte) {
		t.Helper()
		opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
		ret, err := bpf.RunVerdict(h.do, progs[k], h.objs.Metrics(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return ret, opts.DataOut
	}
	smac, dmac := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	for _, c := range []struct {
		kind     firewall.Kind
		src, dst string
		ret      uint32
	}{
		{firewall.KindFromEP, "10.1.0.2", "192.0.2.9", tcRedirect},
		{firewall.KindFromEP, "fd00:1::2", "2001:db8::9", tcRedirect},
		{firewall.KindToEP, "192.0.2.9", "10.1.0.2", tcRedirect},
		{firewall.KindToEP, "2001:db8::9", "fd00:1::2", tcRedirect},
		{firewall.KindUplink, "192.0.2.9", "198.51.100.1", xdpTX},
		{firewall.KindUplink, "2001:db8::9", "2001:db8::1", xdpTX},
	} {
		src, dst := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
		for _, size := range []int{0, 31, 1400} { // payload bytes (31: an odd quote)
			frame := udpFrame(t, smac, dmac, src, dst, 8080, size)
			name := fmt.Sprintf("%s %s->%s udp %d bytes", c.kind, c.src, c.dst, size)
			ret, out := run(c.kind, frame)
			if ret != c.ret {
				t.Errorf("%s: return %d, want %d", name, ret, c.ret)
				continue
			}
			checkICMPUnreach(t, name, frame, out)
		}
		// An ICMP query is answered too; an ICMP error never.
		query, errType := uint32(8), uint32(3)
		proto := uint8(1)
		if src.Is6() {
			query, errType, proto = 128, 1, 58
		}
		frame, _ := fwtest.Frame(firewall.Packet{Kind: c.kind, Src: src, Dst: dst, Proto: proto, DPort: query, SMAC: smac, DMAC: dmac})
		if ret, out := run(c.kind, frame); ret != c.ret {
			t.Errorf("%s %s->%s echo request: return %d, want %d", c.kind, c.src, c.dst, ret, c.ret)
		} else {
			checkICMPUnreach(t, fmt.Sprintf("%s %s->%s echo request", c.kind, c.src, c.dst), frame, out)
		}
		frame, _ = fwtest.Frame(firewall.Packet{Kind: c.kind, Src: src, Dst: dst, Proto: proto, DPort: errType, SPort: 3, SMAC: smac, DMAC: dmac})
		drop := uint32(tcShot)
		if c.kind == firewall.KindUplink {
			drop = xdpDrop
		}
		if ret, _ := run(c.kind, frame); ret != drop {
			t.Errorf("%s %s->%s ICMP error: return %d, want a drop (%d)", c.kind, c.src, c.dst, ret, drop)
		}
	}
	// Broadcast and multicast destinations are not answered.
	for _, dst := range []string{"255.255.255.255", "239.1.2.3"} {
		frame := udpFrame(t, smac, dmac, netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr(dst), 8080, 10)
		if ret, _ := run(firewall.KindUplink, frame); ret != xdpDrop {
			t.Errorf("uplink udp to %s: return %d, want a drop", dst, ret)
		}
	}
}

// udpFrame is a UDP datagram to dport with n payload bytes.
func udpFrame(t *testing.T, smac, dmac [6]byte, src, dst netip.Addr, dport uint16, n int) []byte {
	t.Helper()
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	return bpftest.Frame{SrcMAC: smac[:], DstMAC: dmac[:], Src: netip.AddrPortFrom(src, 40000),
		Dst: netip.AddrPortFrom(dst, dport), Proto: layers.IPProtocolUDP, Payload: payload}.Bytes(t)
}

// checkICMPUnreach checks, byte by byte, that out is the ICMP port
// unreachable answering in: the checksums are computed here from scratch.
func checkICMPUnreach(t *testing.T, name string, in, out []byte) {
	t.Helper()
	if len(out) < 14+48 {
		t.Errorf("%s: answer of %d bytes", name, len(out))
		return
	}
	if !bytes.Equal(out[0:6], in[6:12]) || !bytes.Equal(out[6:12], in[0:6]) || !bytes.Equal(out[12:14], in[12:14]) {
		t.Errorf("%s: Ethernet header % x, want the MACs of % x swapped", name, out[:14], in[:14])
	}
	be := binary.BigEndian
	sum := func(b ...[]byte) uint16 {
		var all []byte
		for _, x := range b {
			all = append(all, x...)
		}
		return checksum(all)
	}
	if in[12] == 0x08 { // IPv4
		q := min(int(binary.BigEndian.Uint16(in[16:])), 548) // the IP packet, not Ethernet's padding
		ip, ic := out[14:34], out[34:42]
		if len(out) != 14+28+q {
			t.Errorf("%s: %d bytes, want %d (quote %d)", name, len(out), 14+28+q, q)
			return
		}
		hdr := append([]byte{}, ip...)
		hdr[10], hdr[11] = 0, 0
		if ip[0] != 0x45 || be.Uint16(ip[2:]) != uint16(28+q) || be.Uint16(ip[6:])&0x1fff != 0 || ip[8] != 64 || ip[9] != 1 ||
			!bytes.Equal(ip[12:16], in[30:34]) || !bytes.Equal(ip[16:20], in[26:30]) || be.Uint16(ip[10:]) != sum(hdr) {
			t.Errorf("%s: IPv4 header % x", name, ip)
		}
		icz := append([]byte{}, ic...)
		icz[2], icz[3] = 0, 0
		if ic[0] != 3 || ic[1] != 3 || be.Uint32(ic[4:]) != 0 || be.Uint16(ic[2:]) != sum(icz, out[42:]) {
			t.Errorf("%s: ICMP header % x (checksum want %#04x)", name, ic, sum(icz, out[42:]))
		}
		if !bytes.Equal(out[42:], in[14:14+q]) {
			t.Errorf("%s: quote is not the first %d bytes of the packet", name, q)
		}
		return
	}
	q := min(40+int(be.Uint16(in[18:])), 1232)
	ip, ic := out[14:54], out[54:62]
	if len(out) != 14+48+q {
		t.Errorf("%s: %d bytes, want %d (quote %d)", name, len(out), 14+48+q, q)
		return
	}
	if be.Uint32(ip[0:]) != 0x60000000 || be.Uint16(ip[4:]) != uint16(8+q) || ip[6] != 58 || ip[7] != 64 ||
		!bytes.Equal(ip[8:24], in[38:54]) || !bytes.Equal(ip[24:40], in[22:38]) {
		t.Errorf("%s: IPv6 header % x", name, ip)
	}
	icz := append([]byte{}, ic...)
	icz[2], icz[3] = 0, 0
	pseudo := append(append([]byte{}, ip[8:40]...), 0, 0, byte((8+q)>>8), byte(8+q), 0, 0, 0, 58)
	if want := sum(pseudo, icz, out[62:]); ic[0] != 1 || ic[1] != 4 || be.Uint32(ic[4:]) != 0 || be.Uint16(ic[2:]) != want {
		t.Errorf("%s: ICMPv6 header % x (checksum want %#04x)", name, ic, want)
	}
	if !bytes.Equal(out[62:], in[14:14+q]) {
		t.Errorf("%s: quote is not the first %d bytes of the packet", name, q)
	}
}

// checkRST decodes out and checks it answers in.
func checkRST(t *testing.T, name string, in, out []byte) {
	t.Helper()
	pin := gopacket.NewPacket(in, layers.LayerTypeEthernet, gopacket.Default)
	pout := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ein, eout := pin.Layer(layers.LayerTypeEthernet).(*layers.Ethernet), pout.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	tin, _ := pin.Layer(layers.LayerTypeTCP).(*layers.TCP)
	tout, _ := pout.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if tout == nil || eout == nil {
		t.Errorf("%s: output is not TCP: %v", name, pout)
		return
	}
	if !bytes.Equal(eout.SrcMAC, ein.DstMAC) || !bytes.Equal(eout.DstMAC, ein.SrcMAC) {
		t.Errorf("%s: MACs not swapped", name)
	}
	if !tout.RST || tout.SrcPort != tin.DstPort || tout.DstPort != tin.SrcPort || len(tout.Payload) != 0 {
		t.Errorf("%s: got %+v, want an RST from port %d to %d without payload", name, tout.TransportFlow(), tin.DstPort, tin.SrcPort)
	}
	if tin.ACK {
		if tout.Seq != tin.Ack || tout.ACK {
			t.Errorf("%s: RST seq %d ack %v, want seq = the segment's ack %d, no ACK", name, tout.Seq, tout.ACK, tin.Ack)
		}
	} else if want := tin.Seq + uint32(len(tin.Payload)) + 1; !tout.ACK || tout.Ack != want {
		t.Errorf("%s: RST ack %d (ACK %v), want %d", name, tout.Ack, tout.ACK, want)
	}
	var pseudo []byte
	if ip, ok := pout.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		ipin := pin.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ip.SrcIP.Equal(ipin.DstIP) || !ip.DstIP.Equal(ipin.SrcIP) || ip.Length != 40 {
			t.Errorf("%s: IPv4 header %+v", name, ip)
		}
		if checksum(out[14:34]) != 0 {
			t.Errorf("%s: bad IPv4 header checksum", name)
		}
		pseudo = append(append(append([]byte{}, ip.SrcIP.To4()...), ip.DstIP.To4()...), 0, 6, 0, 20)
		if checksum(append(pseudo, out[34:54]...)) != 0 {
			t.Errorf("%s: bad TCP checksum", name)
		}
	} else {
		ip := pout.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		ipin := pin.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if !ip.SrcIP.Equal(ipin.DstIP) || !ip.DstIP.Equal(ipin.SrcIP) || ip.Length != 20 {
			t.Errorf("%s: IPv6 header %+v", name, ip)
		}
		pseudo = append(append(append([]byte{}, ip.SrcIP...), ip.DstIP...), 0, 0, 0, 20, 0, 0, 0, 6)
		if checksum(append(pseudo, out[54:74]...)) != 0 {
			t.Errorf("%s: bad TCP checksum", name)
		}
	}
}

// checksum is the Internet checksum of b (0 when b holds a valid one).
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// packetOf describes frame as the reference model sees it, when it is a
// plain IPv4/IPv6 packet (no IPv4 options or fragments, no IPv6
// extension headers) whose transport header, if any, is complete.
func packetOf(frame []byte, k firewall.Kind) (firewall.Packet, bool) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: false, NoCopy: true})
	if p.ErrorLayer() != nil {
		return firewall.Packet{}, false
	}
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil {
		return firewall.Packet{}, false
	}
	pk := firewall.Packet{Kind: k, SMAC: [6]byte(eth.SrcMAC), DMAC: [6]byte(eth.DstMAC), SPort: firewall.NoL4, DPort: firewall.NoL4}
	var l4 []byte
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		// The raw length: gopacket makes up one for a 0 (TSO).
		length := int(frame[16])<<8 | int(frame[17])
		if ip.Version != 4 || ip.IHL != 5 || ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 ||
			length > len(frame)-14 || length < 20 {
			return pk, false
		}
		ip.Length = uint16(length)
		pk.Src, pk.Dst, pk.Proto = netip.AddrFrom4([4]byte(ip.SrcIP.To4())), netip.AddrFrom4([4]byte(ip.DstIP.To4())), uint8(ip.Protocol)
		l4 = frame[34 : 14+int(ip.Length)]
	case *layers.IPv6:
		if ip.Version != 6 {
			return pk, false
		}
		switch ip.NextHeader {
		case 0, 43, 44, 51, 60:
			return pk, false
		}
		ip.Length = uint16(frame[18])<<8 | uint16(frame[19])
		if int(ip.Length)+40 > len(frame)-14 || ip.Length == 0 {
			return pk, false
		}
		pk.Src, pk.Dst, pk.Proto = netip.AddrFrom16([16]byte(ip.SrcIP)), netip.AddrFrom16([16]byte(ip.DstIP)), uint8(ip.NextHeader)
		l4 = frame[54 : 54+int(ip.Length)]
		if pk.Src.Is4In6() || pk.Dst.Is4In6() {
			return pk, false // the reference model unmaps them
		}
	default:
		return pk, false
	}
	switch pk.Proto {
	case 6:
		if len(l4) < 20 {
			return pk, false
		}
		pk.SPort, pk.DPort, pk.Flags = uint32(l4[0])<<8|uint32(l4[1]), uint32(l4[2])<<8|uint32(l4[3]), l4[13]
	case 17:
		if len(l4) < 8 {
			return pk, false
		}
		pk.SPort, pk.DPort = uint32(l4[0])<<8|uint32(l4[1]), uint32(l4[2])<<8|uint32(l4[3])
	case 1, 58:
		if len(l4) < 8 || (pk.Proto == 1) != pk.Src.Is4() {
			return pk, false
		}
		pk.DPort, pk.SPort = uint32(l4[0]), uint32(l4[1])
		if pk.Proto == 58 && pk.DPort >= 133 && pk.DPort <= 137 {
			return pk, false // neighbour discovery is never filtered
		}
	}
	return pk, true
}

// FuzzFirewallPacket feeds arbitrary frames to the uplink program with a
// rule set over every field installed: the stage must never make the
// program fail, and whenever the frame is a packet the reference model
// describes, the rule that decides it must be the model's.
func FuzzFirewallPacket(f *testing.F) {
	h := newFwHarness(f)
	rng := rand.New(rand.NewPCG(42, 42))
	rs := fwtest.RandomRuleSet(rng, 300)
	for i := range rs.Rules {
		rs.Rules[i].Scope, rs.Rules[i].Direction = "uplink", ""
	}
	pol := h.install(f, rs, true)
	h.in.SetDDoS(bpf.FwDdos{})
	for i := 0; i < 40; i++ {
		pk := fwtest.RandomPacket(rng, firewall.KindUplink)
		if frame, err := fwtest.Frame(pk); err == nil {
			f.Add(frame)
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 1514 {
			return
		}
		h.drain(t)
		_, _, err := h.run(firewall.KindUplink, frame)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		got := h.drain(t)
		pk, ok := packetOf(frame, firewall.KindUplink)
		if !ok || linkScope(pk.Dst) || isEndpoint(pk.Dst) {
			return
		}
		want, wantLog := pol.Evaluate(pk)
		if want >= 0 {
			wantLog = append(wantLog, want)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantLog) {
			t.Fatalf("packet %+v: datapath rules %v, reference %v", pk, got, wantLog)
		}
	})
}

// TestFirewallInstallTime reports how long validating, compiling and
// installing big rule sets takes, and their size (docs/firewall.md).
func TestFirewallInstallTime(t *testing.T) {
	h := newFwHarness(t)
	sizes := []int{1000, 10000, 16000}
	if testing.Short() {
		sizes = []int{1000}
	}
	for _, n := range sizes {
		rs := firewallRules(n, true)
		for i := range rs.Rules {
			if i%3 == 1 { // more fields and classes: ports, families
				rs.Rules[i].Src = nil
				rs.Rules[i].Dst = firewall.List{fmt.Sprintf("2001:db8:%x::/48", i)}
			}
		}
		begin := time.Now()
		pol, err := firewall.Validate(rs, fwtest.Resolver())
		if err != nil {
			t.Fatal(err)
		}
		validated := time.Since(begin)
		slots := map[string]uint32{}
		for i := range pol.Rules {
			slots[pol.Rules[i].Name] = uint32(i)
		}
		tab, err := firewall.Compile(pol, slots)
		if err != nil {
			t.Fatal(err)
		}
		compiled := time.Since(begin)
		if _, err := h.in.Install(tab); err != nil {
			t.Fatal(err)
		}
		t.Logf("%5d rules: validate %v, compile %v, install %v (total %v); %d classes = %.1f MB of bitmaps, %d prefixes",
			n, validated.Round(time.Millisecond), (compiled - validated).Round(time.Millisecond),
			(time.Since(begin) - compiled).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond),
			len(tab.Pool), float64(len(tab.Pool)*2080)/1e6, len(tab.Addr))
	}
}

// TestFirewallNetkit: netkit endpoints run the same stage. The peer
// program (the container's transmit: the tc pipeline) classifies
// from-endpoint, drops and answers rejects (RST, ICMP) back into the
// container; the primary program (what enters the container) classifies
// to-endpoint and drops refusals (its answers could not reach the sender).
func TestFirewallNetkit(t *testing.T) {
	h := newFwHarness(t)
	nk := bpf.NetkitFor(t, h.objs)
	h.install(t, &firewall.RuleSet{Rules: []firewall.Rule{
		{Name: "out-drop", Action: "drop", Direction: "from-endpoint", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"8081"}},
		{Name: "out-reject", Action: "reject", Direction: "from-endpoint", Proto: firewall.List{"tcp", "udp"}, DstPort: firewall.List{"8082"}},
		{Name: "in-drop", Action: "drop", Direction: "to-endpoint", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"8081"}},
		{Name: "in-reject", Action: "reject", Direction: "to-endpoint", Proto: firewall.List{"udp"}, DstPort: firewall.List{"8082"}},
	}}, false)
	run := func(prog *ebpf.Program, frame []byte) (uint32, []byte) {
		t.Helper()
		opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
		ret, err := bpf.RunVerdict(h.do, prog, h.objs.Metrics(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return ret, opts.DataOut
	}
	smac, dmac := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	ep, remote := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("192.0.2.9")
	tcp := func(src, dst netip.Addr, dport uint16) []byte {
		f, err := fwtest.Frame(firewall.Packet{Src: src, Dst: dst, Proto: 6, SPort: 40000, DPort: uint32(dport), Flags: 0x02, SMAC: smac, DMAC: dmac})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if ret, _ := run(nk.FromEndpoint, tcp(ep, remote, 8081)); ret != tcShot {
		t.Errorf("peer program, dropped port: return %d, want %d", ret, tcShot)
	}
	if ret, out := run(nk.FromEndpoint, tcp(ep, remote, 8082)); ret != tcRedirect {
		t.Errorf("peer program, rejected TCP: return %d, want %d", ret, tcRedirect)
	} else {
		checkRST(t, "netkit peer", tcp(ep, remote, 8082), out)
	}
	f := udpFrame(t, smac, dmac, ep, remote, 8082, 10)
	if ret, out := run(nk.FromEndpoint, f); ret != tcRedirect {
		t.Errorf("peer program, rejected UDP: return %d, want %d", ret, tcRedirect)
	} else {
		checkICMPUnreach(t, "netkit peer udp", f, out)
	}
	if ret, _ := run(nk.FromEndpoint, tcp(ep, remote, 8083)); ret == tcShot {
		t.Errorf("peer program, allowed port: dropped")
	}
	if ret, _ := run(nk.ToEndpoint, tcp(remote, ep, 8081)); ret != tcShot {
		t.Errorf("primary program, dropped port: return %d, want %d", ret, tcShot)
	}
	if ret, _ := run(nk.ToEndpoint, udpFrame(t, smac, dmac, remote, ep, 8082, 10)); ret != tcShot {
		t.Errorf("primary program, rejected UDP: return %d, want a drop (%d)", ret, tcShot)
	}
	if ret, _ := run(nk.ToEndpoint, tcp(remote, ep, 8083)); ret == tcShot {
		t.Errorf("primary program, allowed port: dropped")
	}
}

// BenchmarkCompareFirewall compares the uplink XDP program of the old
// objects (XLANE_BENCH_OLD, see bench_compare_test.go) with the embedded
// ones and a second copy of the old (the control), interleaved: firewall
// off, 1 and 1,000 rules none of which matches, and 1 and 1,000 rules the
// last of which drops the packet.
//
// The "/call" paths run the program once per BPF_PROG_RUN call
// (compareFlowCalls calls per sample), cycling over their frames, so that
// consecutive packets are different flows: "2 sports" alternates the
// source port (the remembered conntrack miss, keyed by the 5-tuple,
// misses every packet; the remembered tuple, keyed by protocol, source
// address and destination port, hits), "2 srcs" two source addresses each
// dropped by its own /32 rule (both miss). Their "1 flow" path is the same
// single-run call with one frame: the per-call overhead (one clock read in
// the kernel's timer) is in all of them alike.
func BenchmarkCompareFirewall(b *testing.B) {
	dir := os.Getenv("XLANE_BENCH_OLD")
	if dir == "" {
		b.Skip("XLANE_BENCH_OLD names no directory of old objects")
	}
	frame := tcpFrame(b, "203.0.113.5", "192.0.2.1", 0x10)
	frame2 := tcpFrame(b, "203.0.113.6", "192.0.2.1", 0x10)
	sport2, err := fwtest.Frame(firewall.Packet{Src: netip.MustParseAddr("203.0.113.5"), Dst: netip.MustParseAddr("192.0.2.1"),
		Proto: 6, SPort: 40001, DPort: 80, Flags: 0x10})
	if err != nil {
		b.Fatal(err)
	}
	const compareFlowCalls = 600
	type trio struct {
		name   string
		want   uint32
		frames [][]byte // more than none: one run per call, cycling over them
		h      [3]*fwHarness
		ns     [3][]float64
	}
	var trios []*trio
	for _, c := range []struct {
		name  string
		rules int
		last  bool
		want  uint32
		exact bool // the last rule's source a /32: all tuples
		state bool // established: true
		// frames: one run per call over these; src2: the rule before
		// the last drops 203.0.113.6 (a /32), so both sources match
		frames [][]byte
		src2   bool
	}{{"uplink fw off", 0, false, xdpPass, false, true, nil, false}, {"uplink 1 rule pass", 1, false, xdpPass, false, true, nil, false},
		{"uplink 1 rule drop", 1, true, xdpDrop, false, true, nil, false},
		{"uplink 1 rule drop stateless", 1, true, xdpDrop, false, false, nil, false},
		{"uplink 1000 rules pass", 1000, false, xdpPass, false, true, nil, false},
		{"uplink 1000 rules drop-by-last", 1000, true, xdpDrop, false, true, nil, false},
		{"uplink 1000 tuples drop-by-last", 1000, true, xdpDrop, true, true, nil, false},
		{"uplink 10000 tuples drop-by-last", 10000, true, xdpDrop, true, true, nil, false},
		{"1 rule drop, 1 flow /call", 1, true, xdpDrop, false, true, [][]byte{frame}, false},
		{"1 rule drop, 2 sports /call", 1, true, xdpDrop, false, true, [][]byte{frame, sport2}, false},
		{"10k tuples drop, 1 flow /call", 10000, true, xdpDrop, true, true, [][]byte{frame}, true},
		{"10k tuples drop, 2 sports /call", 10000, true, xdpDrop, true, true, [][]byte{frame, sport2}, true},
		{"10k tuples drop, 2 srcs /call", 10000, true, xdpDrop, true, true, [][]byte{frame, frame2}, true}} {
		p := &trio{name: c.name, want: c.want, frames: c.frames}
		// "." (the package's own objects), not "": ObjectsFor("") is
		// one shared set, and every trio installs its own rules.
		for i, d := range []string{dir, ".", dir} {
			p.h[i] = newFwHarnessFrom(b, d)
			if p.h[i].objs.MetricsUplink() != nil {
				// As the daemon does: the uplink's counters in the
				// array (the test run's device is the netns's lo);
				// old objects that have the array too, or the
				// comparison is of the metrics hash, not the build.
				setUplinkCounters(b, p.h[i].objs, 1)
			}
			if c.rules > 0 {
				rs := firewallRules(c.rules, c.last)
				if c.exact {
					rs.Rules[c.rules-1].Src = firewall.List{"203.0.113.5"}
				}
				if c.src2 {
					rs.Rules[c.rules-2].Src = firewall.List{"203.0.113.6"}
					rs.Rules[c.rules-2].DstPort = firewall.List{"80"}
				}
				rs.Established = &c.state
				p.h[i].install(b, rs, false)
			}
		}
		trios = append(trios, p)
	}
	for r := range 61 {
		for _, p := range trios {
			for j := range 3 {
				i := (j + r) % 3
				var d time.Duration
				var ret uint32
				err := p.h[i].do(func() (err error) {
					prog := p.h[i].objs.XDPFromUplink()
					if len(p.frames) == 0 {
						ret, d, err = prog.Benchmark(frame, 3000, nil)
						return err
					}
					for k := range compareFlowCalls {
						r, dk, err := prog.Benchmark(p.frames[k%len(p.frames)], 1, nil)
						if err != nil || r != p.want {
							ret = r
							return err
						}
						d += dk
					}
					ret, d = p.want, d/compareFlowCalls
					return nil
				})
				if err != nil || ret != p.want {
					b.Fatalf("%s: return value %d, %v", p.name, ret, err)
				}
				p.ns[i] = append(p.ns[i], float64(d.Nanoseconds()))
			}
		}
	}
	b.Logf("%-32s %8s %8s %8s %8s %8s", "path", "old ns", "new ns", "ctl ns", "new/old", "ctl/old")
	for _, p := range trios {
		o, c, a := fwMedian(p.ns[0]), fwMedian(p.ns[1]), fwMedian(p.ns[2])
		b.Logf("%-32s %8.1f %8.1f %8.1f %8.3f %8.3f", p.name, o, c, a, c/o, a/o)
	}
}

func fwMedian(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
