package bpf

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// monEvents drains the monitor ring (it is empty once a read waits
// 50 ms).
func monEvents(t *testing.T, rd *ringbuf.Reader) []MonEvent {
	t.Helper()
	var out []MonEvent
	for {
		rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatalf("read monitor ring: %v", err)
		}
		e, err := DecodeMonEvent(rec.RawSample)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
}

func evAddr(b [16]uint8) netip.Addr { return netip.AddrFrom16(b).Unmap() }

// TestMonitorEvents: the monitor's events as bpf/lib/monitor.h emits them
// (one harness: a load costs most of this test in the kernel-matrix
// guests). Off, nothing is written or counted; drops come from the exit
// with reason and tuple (IPv4 and IPv6), forwarded packets only with
// MON_VERDICT; a new flow and its translation are emitted at the exit of
// the run that created them; the per-CPU rate limit counts what it
// suppresses.
func TestMonitorEvents(t *testing.T) {
	h := newHarness(t)
	mon := h.objs.Monitor()
	rd, err := ringbuf.NewReader(mon.Events)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ep0 := h.links[devEP0]
	spoof4 := pktSpec{src: addr("10.9.9.9"), dst: epPeer.v4}.frame(t)
	spoof6 := pktSpec{src: addr("fd00::99"), dst: epPeer.v6}.frame(t)
	set := func(types MonType, rate, burst uint32) {
		t.Helper()
		if err := mon.Set(types, rate, burst); err != nil {
			t.Fatal(err)
		}
	}
	run := func(frame []byte) {
		t.Helper()
		if _, _, err := h.run(frame, ep0); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("off", func(t *testing.T) {
		run(spoof4)
		run(tcp4(t, epPeer.v4))
		if evs := monEvents(t, rd); len(evs) != 0 {
			t.Fatalf("monitor off: %d events", len(evs))
		}
		if c, err := mon.Counters(); err != nil || c != (MonCounters{}) {
			t.Fatalf("monitor off: counters %+v, %v", c, err)
		}
	})

	t.Run("drop", func(t *testing.T) {
		set(MonDrop, 0, 0)
		run(spoof4)
		run(spoof6)
		run(tcp4(t, epPeer.v4)) // forwarded: no drop event
		evs := monEvents(t, rd)
		if len(evs) != 2 {
			t.Fatalf("got %d events, want 2 drops: %+v", len(evs), evs)
		}
		for i, want := range []struct {
			fam      uint8
			src, dst netip.Addr
		}{{4, addr("10.9.9.9"), epPeer.v4}, {6, addr("fd00::99"), epPeer.v6}} {
			e := evs[i]
			if MonType(e.Type) != MonDrop || Reason(e.Reason).String() != "drop_spoofed" || e.Verdict != MonVDrop ||
				e.Kind != FwKindFromEP || e.Ifindex != uint32(ep0) || e.Family != want.fam ||
				evAddr(e.Saddr) != want.src || evAddr(e.Daddr) != want.dst || e.Proto != 6 ||
				nbo(e.Sport) != 40000 || nbo(e.Dport) != 80 || e.Len != uint32(len(spoof4)+int(want.fam/6)*20) {
				t.Errorf("event %d: %+v, want a drop_spoofed of %v -> %v:80 on %d", i, e, want.src, want.dst, ep0)
			}
		}
	})

	t.Run("verdict", func(t *testing.T) {
		set(MonVerdict, 0, 0)
		run(tcp6(t, epPeer.v6))
		evs := monEvents(t, rd)
		if len(evs) != 1 || MonType(evs[0].Type) != MonVerdict || Reason(evs[0].Reason).String() != "fwd_peer" ||
			evs[0].Verdict != MonVFwd || evAddr(evs[0].Daddr) != epPeer.v6 {
			t.Fatalf("got %+v, want one fwd_peer verdict", evs)
		}
	})

	t.Run("flow and nat", func(t *testing.T) {
		h.setNode(t, natPortMin, natPortMax)
		h.setMasquerade(t, epSrc, true)
		set(MonFlowNew|MonNAT, 0, 0)
		f := ctFlow{proto: ctUDP, src: ap(epSrc.v6, 40123), dst: ap(remoteV6, 53)}
		if ret, _, _ := h.ctRun(t, progFromEP, devEP0, f.orig("").sentBy(epSrc)); ret != actRedirect {
			t.Fatalf("masqueraded flow: ret %d", ret)
		}
		evs := monEvents(t, rd)
		if len(evs) != 2 || MonType(evs[0].Type) != MonFlowNew || MonType(evs[1].Type) != MonNAT {
			t.Fatalf("got %+v, want flow_new then nat", evs)
		}
		for _, e := range evs {
			if evAddr(e.Saddr) != epSrc.v6 || evAddr(e.Daddr) != remoteV6 || nbo(e.Sport) != 40123 ||
				nbo(e.Dport) != 53 || e.Proto != 17 || e.Family != 6 {
				t.Errorf("%v event %+v: not the flow %v", MonType(e.Type), e, f)
			}
		}
		if n := evs[1]; CTNat(n.Action) != CTNatSrc || evAddr(n.NatAddr) != nodeV6 ||
			nbo(n.NatPort) < natPortMin || nbo(n.NatPort) > natPortMax {
			t.Errorf("nat event %+v: want SNAT to %v and a port in %d-%d", n, nodeV6, natPortMin, natPortMax)
		}
	})

	t.Run("rate limit", func(t *testing.T) {
		set(MonDrop, 1, 2)
		before, err := mon.Counters()
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			run(spoof4)
		}
		after, err := mon.Counters()
		if err != nil {
			t.Fatal(err)
		}
		// The runs may move between CPUs, each with its own bucket of 2.
		evs := monEvents(t, rd)
		got := after.Suppressed - before.Suppressed
		if uint64(len(evs))+got != 5 || got == 0 || after.Emitted-before.Emitted != uint64(len(evs)) {
			t.Fatalf("5 drops at 1/s, burst 2: %d events, %d suppressed (counters %+v -> %+v)",
				len(evs), got, before, after)
		}
	})
	// The rate limit's skipping (lib/monitor.h, mon_skip_after): each
	// CPU's state is set, one forwarded packet runs, and the one CPU whose
	// state moved is checked. Found empty, the bucket suppresses the
	// events expected before its next token at the rate they came at.
	states := func() []MonState {
		t.Helper()
		var per []MonState
		if err := mon.State.Lookup(uint32(0), &per); err != nil {
			t.Fatal(err)
		}
		return per
	}
	setStates := func(s MonState) []MonState {
		t.Helper()
		per := states()
		for i := range per {
			per[i] = s
		}
		if err := mon.State.Put(uint32(0), per); err != nil {
			t.Fatal(err)
		}
		return per
	}
	moved := func(before []MonState) MonState {
		t.Helper()
		var got []MonState
		for i, s := range states() {
			if s != before[i] {
				got = append(got, s)
			}
		}
		if len(got) != 1 {
			t.Fatalf("one run moved the rate limit's state of %d CPUs, want 1", len(got))
		}
		return got[0]
	}
	fwd := tcp4(t, epPeer.v4)

	t.Run("rate limit estimate", func(t *testing.T) {
		// An empty bucket, the clock last read 200 ms ago, 9 events
		// suppressed since (this one the 10th): at 1 a second the bucket
		// holds 0.2 token, short of one unless the run comes 800 ms
		// late, and the next is 0.8 s away: 40 more events at this rate.
		set(MonVerdict, 1, 1)
		last := monoNow(t) - 200_000_000
		before := setStates(MonState{Last: last, Seen: 9})
		run(fwd)
		s := moved(before)
		elapsed := s.Last - last
		if s.Last <= last || s.Tokens >= 1_000_000_000 {
			t.Fatalf("state %+v: the clock was not read, or the bucket filled (elapsed %d ns)", s, elapsed)
		}
		want := min(63, (1_000_000_000-s.Tokens)*10/1/elapsed)
		if uint64(s.Skip) != want || s.Seen != 0 || s.Suppressed != 1 || s.Emitted != 0 {
			t.Errorf("state %+v after %d ns: want skip %d (the events due before the next token), seen 0, 1 suppressed, none emitted",
				s, elapsed, want)
		}
		if evs := monEvents(t, rd); len(evs) != 0 {
			t.Errorf("suppressed, yet %d events: %+v", len(evs), evs)
		}
	})

	t.Run("rate limit skip", func(t *testing.T) {
		// A run of skips: suppressed and counted without the clock.
		set(MonVerdict, 1000, 1)
		before := setStates(MonState{Last: 12345, Skip: 5, Seen: 2})
		run(fwd)
		s := moved(before)
		if s.Last != 12345 || s.Skip != 4 || s.Seen != 3 || s.Suppressed != 1 || s.Emitted != 0 {
			t.Errorf("state %+v: want the clock unread (last 12345), skip 4, seen 3, 1 suppressed", s)
		}
	})

	t.Run("rate limit flood", func(t *testing.T) {
		// A verdict per packet, 1,000 packets as fast as BPF_PROG_TEST_RUN
		// runs them: every event counted, no more through than a bucket
		// of 2 and 1,000 a second allow on each CPU, some through.
		set(MonVerdict, 1000, 2)
		setStates(MonState{})
		frame := pktSpec{src: epLo.v4, dst: epPeer.v4, ttl: 255}.frame(t)
		start := time.Now()
		if _, err := sampleRuns(h.do, h.objs.FromEndpoint(), frame, actRedirect, 4, 250); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		c, err := mon.Counters()
		if err != nil {
			t.Fatal(err)
		}
		evs := monEvents(t, rd)
		limit := uint64(len(states())) * (2 + uint64(took.Milliseconds()) + 1)
		if c.Emitted+c.Suppressed != 1000 || c.Lost != 0 || c.Emitted != uint64(len(evs)) || c.Emitted == 0 ||
			c.Emitted > limit {
			t.Errorf("1,000 packets in %v at 1,000/s, burst 2: counters %+v, %d events; want them to add up to 1,000, "+
				"between 1 and %d emitted", took, c, len(evs), limit)
		}
	})
	setStates(MonState{})
	set(0, 0, 0)
}

// BenchmarkMonitorCost: what the monitor's hooks cost a forwarded packet
// (tc, endpoint to peer) with the monitor off, with the default types on
// (none of them is about a forwarded packet of an established flow), with
// every type on at the default rate (1,000 a second per CPU: past its
// burst, a packet's verdict event is suppressed by the token bucket) and
// with every type on and no limit (each packet writes an event; a reader
// drains the ring meanwhile). The loop keeps the code and the maps in the
// caches: on the real path (bench/modes -observe) a forwarded packet's
// hooks cost more than here.
// The three interleave per round on one harness; medians, ratios to off.
//
//	go test -run '^$' -bench MonitorCost -benchtime 1x ./internal/bpf
func BenchmarkMonitorCost(b *testing.B) {
	h := newHarness(b)
	mon := h.objs.Monitor()
	rd, err := ringbuf.NewReader(mon.Events)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	done := make(chan struct{})
	go func() { // drain, as xlaned does
		defer close(done)
		var rec ringbuf.Record
		for {
			rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
			if err := rd.ReadInto(&rec); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	defer func() { rd.Close(); <-done }()
	frame := pktSpec{src: epLo.v4, dst: epPeer.v4, ttl: 255}.frame(b)
	variants := []struct {
		name        string
		types       MonType
		rate, burst uint32
	}{
		{"off", 0, 0, 0},
		{"default types", MonAll &^ MonVerdict, 1000, 100},
		{"all, rate 1000", MonAll, 1000, 100},
		{"all, unlimited", MonAll, 0, 0},
	}
	samples := map[string][]float64{}
	for r := range compareRounds {
		for j := range variants {
			v := variants[(j+r)%len(variants)]
			if err := mon.Set(v.types, v.rate, v.burst); err != nil {
				b.Fatal(err)
			}
			ns, err := sampleRuns(h.do, h.objs.FromEndpoint(), frame, actRedirect, compareCalls, compareBatch)
			if err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			samples[v.name] = append(samples[v.name], ns)
		}
	}
	mon.Set(0, 0, 0)
	off := median(samples["off"])
	for _, v := range variants {
		m := median(samples[v.name])
		b.Logf("%-16s %7.1f ns/packet  %.3fx off", v.name, m, m/off)
	}
	c, _ := mon.Counters()
	b.Logf("counters: %+v", c)
}

// BenchmarkCompareMonitor: the monitor's per-packet cost in two builds
// (bench_compare_test.go: the embedded objects against XLANE_BENCH_OLD's,
// a second copy of the old as the control), a forwarded packet (tc,
// endpoint to peer) with the monitor off and with every type on at a rate
// that gives a token per ~55 runs, as 1,000 events a second per CPU do
// at the ~55,000 packets a second per CPU of bench/modes' TCP 4 streams:
// the rate limit's regime there (lib/monitor.h), where the skipping
// decides how many packets call the emitter and read the clock.
//
//	XLANE_BENCH_OLD=/path/to/old go test -run '^$' -bench CompareMonitor -benchtime 1x ./internal/bpf
func BenchmarkCompareMonitor(b *testing.B) {
	dir := os.Getenv("XLANE_BENCH_OLD")
	if dir == "" {
		b.Skip("XLANE_BENCH_OLD names no directory of old objects")
	}
	hs := []*harness{buildHarness(b, harnessCfg{dir: dir}), newHarness(b), buildHarness(b, harnessCfg{dir: dir})}
	for _, h := range hs {
		rd, err := ringbuf.NewReader(h.objs.Monitor().Events)
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		go func() { // drain, as xlaned does
			defer close(done)
			var rec ringbuf.Record
			for {
				rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
				if err := rd.ReadInto(&rec); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
			}
		}()
		defer func() { rd.Close(); <-done }()
	}
	frame := pktSpec{src: epLo.v4, dst: epPeer.v4, ttl: 255}.frame(b)
	// The runs' pace, BPF_PROG_TEST_RUN's calls included: the rate that
	// gives a token per 55 of them.
	start := time.Now()
	if _, err := sampleRuns(hs[1].do, hs[1].objs.FromEndpoint(), frame, actRedirect, compareCalls, compareBatch); err != nil {
		b.Fatal(err)
	}
	perSec := float64(compareCalls*compareBatch) / time.Since(start).Seconds()
	rate := uint32(max(perSec/55, 1))
	b.Logf("%.0f runs/s: rate %d events/s", perSec, rate)
	variants := []struct {
		name  string
		types MonType
		rate  uint32
	}{{"off", 0, 0}, {"all, a token per ~55 runs", MonAll, rate}}
	samples := [3]map[string][]float64{{}, {}, {}}
	var names []string
	for _, v := range variants {
		names = append(names, v.name)
	}
	for r := range compareRounds {
		for _, v := range variants {
			for j := range 3 {
				i := (j + r) % 3 // each build leads in turn
				h := hs[i]
				if err := h.objs.Monitor().Set(v.types, v.rate, max(v.rate/10, 1)); err != nil {
					b.Fatal(err)
				}
				ns, err := sampleRuns(h.do, h.objs.FromEndpoint(), frame, actRedirect, compareCalls, compareBatch)
				if err != nil {
					b.Fatalf("%s (%s): %v", v.name, []string{"old", "new", "control"}[i], err)
				}
				samples[i][v.name] = append(samples[i][v.name], ns)
			}
		}
	}
	for i, h := range hs {
		c, _ := h.objs.Monitor().Counters()
		b.Logf("%s counters: %+v", []string{"old", "new", "control"}[i], c)
		h.objs.Monitor().Set(0, 0, 0)
	}
	compareReport(b, names, samples)
}

// TestMonitorBuiltOut: loaded with the monitor switched off
// (Options.NoMonitor: xl_monitor, bpf/lib/monitor.h), the programs emit
// and count nothing with every event type wanted and no rate limit, and
// give each packet the return code the programs with the monitor give it,
// which emit for the same packets; the verifier removed the hooks, so the
// programs are shorter.
func TestMonitorBuiltOut(t *testing.T) {
	on, off := newHarness(t), newHarness(t, Options{NoMonitor: true})
	if !on.objs.MonitorBuiltIn() || off.objs.MonitorBuiltIn() {
		t.Fatalf("MonitorBuiltIn: %v with the monitor, %v without", on.objs.MonitorBuiltIn(), off.objs.MonitorBuiltIn())
	}
	frames := []struct {
		name  string
		frame []byte
		want  int32
	}{
		{"spoofed (drop)", pktSpec{src: addr("10.9.9.9"), dst: epPeer.v4}.frame(t), actShot},
		{"spoofed v6 (drop)", pktSpec{src: addr("fd00::99"), dst: epPeer.v6}.frame(t), actShot},
		{"to a peer (forward)", tcp4(t, epPeer.v4), actRedirect},
		{"to a peer v6 (forward)", tcp6(t, epPeer.v6), actRedirect},
	}
	events := map[*harness]int{}
	for _, h := range []*harness{on, off} {
		mon := h.objs.Monitor()
		rd, err := ringbuf.NewReader(mon.Events)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		if err := mon.Set(MonAll, 0, 0); err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			ret, _, err := h.run(f.frame, h.links[devEP0])
			if err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			if ret != f.want {
				t.Errorf("%s, monitor built in %v: return code %d, want %d", f.name, h.objs.MonitorBuiltIn(), ret, f.want)
			}
		}
		for _, e := range monEvents(t, rd) {
			if MonType(e.Type) == MonVerdict {
				events[h]++
			}
		}
		c, err := mon.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if h == off && c != (MonCounters{}) {
			t.Errorf("monitor built out: counters %+v, want none", c)
		}
	}
	if events[on] != len(frames) || events[off] != 0 {
		t.Errorf("every type wanted: %d verdict events with the monitor built in (want %d, one per packet), %d without (want 0)",
			events[on], len(frames), events[off])
	}
	for _, p := range []struct {
		name    string
		on, off *ebpf.Program
	}{
		{"xlane_from_endpoint", on.objs.FromEndpoint(), off.objs.FromEndpoint()},
		{"xlane_to_endpoint", on.objs.ToEndpoint(), off.objs.ToEndpoint()},
	} {
		n := [2]int{}
		for i, prog := range []*ebpf.Program{p.on, p.off} {
			info, err := prog.Info()
			if err != nil {
				t.Fatal(err)
			}
			insns, err := info.Instructions()
			if err != nil {
				t.Fatalf("%s: xlated instructions: %v", p.name, err)
			}
			n[i] = len(insns)
		}
		t.Logf("%s: %d xlated instructions with the monitor, %d without", p.name, n[0], n[1])
		if n[1] >= n[0] {
			t.Errorf("%s: %d xlated instructions without the monitor, not fewer than with it (%d): the hooks were not removed", p.name, n[1], n[0])
		}
	}
}
