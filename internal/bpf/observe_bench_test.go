package bpf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket/layers"
)

// BenchmarkObserveCost is the per-packet cost of the monitor's hooks on
// xlane_from_endpoint, measured by the kernel (BPF_PROG_TEST_RUN with
// repeat): the part of issue 19's benchmark (bench/modes -observe) that a
// 2-core machine's end-to-end noise cannot resolve. Variants, each its own
// load of the objects in its own netns:
//
//	off      the monitor built out (Options.NoMonitor): observability off
//	on       the hooks in, no listener (types 0): the default daemon
//	on-aa    the same again: the A/A control of on (another load, another
//	         JIT image), whose difference to on is the noise floor
//	default  a listener with xlane monitor's default types (all but
//	         verdicts) at the daemon's default rate
//	all      a listener with every type (a verdict event per packet) at
//	         the daemon's default rate
//
// Paths: an established TCP flow's data packet, a new flow's SYN (its
// conntrack entries deleted before every run, so each run creates the
// flow: one run per call), a 60-byte UDP datagram forwarded on its flow
// (the rate test's 64-byte frame without FCS) and a dropped packet (a
// spoofed source), every one from an endpoint to a local peer. Rounds
// interleave the variants (rotated each round) path by path; a sample is
// the kernel's ns per run over its calls, less the calls an outside event
// made 3 times slower than the sample's median call (counted).
//
// The listeners' token bucket (per CPU, burst a tenth of the rate) bounds
// the events, and what a listener costs a packet depends on how many
// packets come per token: those that emit or read the clock call the
// emitter, the rest are settled inline (mon_exit_call, lib/monitor.h). A
// loop of BPF_PROG_TEST_RUN runs millions of packets a second where the
// real path runs tens of thousands per CPU (TCP) to about two million
// (the 64-byte rate test), so the rate is set per path to give the real
// path's packets per token at the daemon's 1,000 events a second per CPU:
// XLANE_OBSERVE_TCP_PER_TOKEN for the established TCP flow (default 55:
// TCP 4 streams at ~55,000 runs a second per CPU), XLANE_OBSERVE_UDP_PER_TOKEN
// for the UDP forward and the drop (default 1,500: ~1.5 Mpps on one CPU);
// bench/modes -observe passes the figures of its own end-to-end run. The
// SYN path runs at 1,000 events a second as is. The ring (16,384 events)
// never fills: it is drained after every round and its lost counter must
// stay 0.
//
//	go test -run '^$' -bench ObserveCost -benchtime 1x ./internal/bpf
//
// XLANE_OBSERVE_ROUNDS sets the rounds (default 41), XLANE_OBSERVE_JSON a
// file for the samples (bench/modes -observe reads it: ObserveResult).
func BenchmarkObserveCost(b *testing.B) {
	rounds := envInt(b, "XLANE_OBSERVE_ROUNDS", 41)
	tcpPer := envInt(b, "XLANE_OBSERVE_TCP_PER_TOKEN", 55)
	udpPer := envInt(b, "XLANE_OBSERVE_UDP_PER_TOKEN", 1500)
	const daemonRate = 1000 // internal/daemon DefaultMonitorRate
	variants := []struct {
		name  string
		opt   Options
		types MonType
	}{
		{"off", Options{NoMonitor: true}, 0},
		{"on", Options{}, 0},
		{"on-aa", Options{}, 0},
		{"default", Options{}, MonAll &^ MonVerdict},
		{"all", Options{}, MonAll},
	}
	type loaded struct {
		h   *harness
		mon MonitorMaps
		rd  *ringbuf.Reader
	}
	ls := make([]loaded, len(variants))
	for i, v := range variants {
		h := newHarness(b, v.opt)
		mon := h.objs.Monitor()
		if err := mon.Set(v.types, daemonRate, daemonRate/10); err != nil {
			b.Fatal(err)
		}
		rd, err := ringbuf.NewReader(mon.Events)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rd.Close() })
		ls[i] = loaded{h, mon, rd}
	}

	// Every path sends from epLo: prog.Benchmark passes no context, so the
	// packet comes in on lo, epLo's device.
	est := ctFlow{src: ap(epLo.v4, 40001), dst: ap(epPeer.v4, 80)}
	syn := ctFlow{src: ap(epLo.v4, 40002), dst: ap(epPeer.v4, 80)}
	udp := pktSpec{src: epLo.v4, dst: epPeer.v4, proto: layers.IPProtocolUDP, ttl: 255, payload: make([]byte, 18)}.frame(b)
	if len(udp) != 60 {
		b.Fatalf("UDP frame of %d bytes, want 60", len(udp))
	}
	estPkt := est.orig("A").sentBy(epLo)
	estPkt.ttl = 255
	synPkt := syn.orig("S").sentBy(epLo)
	synPkt.ttl = 255
	paths := []struct {
		name  string
		frame []byte
		want  int32
		batch int // runs per call; 1: the flow is new every run (prep)
		calls int
		// prep runs before every call (outside the kernel's timing).
		prep func(h *harness) error
		// perToken: runs per token of the listeners' rate limit (0: the
		// daemon's rate as is).
		perToken int
	}{
		{"tcp-established", estPkt.frame(b), actRedirect, 250, 24, nil, tcpPer},
		{"tcp-syn-new-flow", synPkt.frame(b), actRedirect, 1, 200, func(h *harness) error { return clearCT(h.objs.CT()) }, 0},
		{"udp-60B-forward", udp, actRedirect, 250, 24, nil, udpPer},
		{"drop-spoofed", pktSpec{src: addr("10.9.9.9"), dst: epPeer.v4, ttl: 255}.frame(b), actShot, 250, 24, nil, udpPer},
	}
	prepOf := func(i int, l loaded) func() error {
		p := paths[i]
		return func() error {
			if p.prep == nil {
				return nil
			}
			return p.prep(l.h)
		}
	}
	// The established flow: opened by its SYN, then marked established in
	// both directions (the peer, a fake device, cannot answer).
	for _, l := range ls {
		if _, _, err := sampleRunsPrep(l.h.do, l.h.objs.FromEndpoint(), synOf(b, est), actRedirect, 1, 1,
			func() error { return nil }); err != nil {
			b.Fatalf("open the established flow: %v", err)
		}
		if err := establishAll(l.h.objs.CT()); err != nil {
			b.Fatal(err)
		}
	}

	res := ObserveResult{Rounds: rounds, Samples: map[string]map[string][]float64{}}
	for _, v := range variants {
		res.Variants = append(res.Variants, v.name)
	}
	// Each path's rate: its packets per token at the speed of a warm-up
	// sample (the hooks in, no listener).
	for i, p := range paths {
		rate := uint32(daemonRate)
		if p.perToken > 0 {
			ns, _, err := sampleRunsPrep(ls[1].h.do, ls[1].h.objs.FromEndpoint(), p.frame, p.want, p.calls, p.batch, prepOf(i, ls[1]))
			if err != nil {
				b.Fatalf("%s: warm-up: %v", p.name, err)
			}
			rate = uint32(max(1, math.Round(1e9/ns/float64(p.perToken))))
		}
		res.Paths = append(res.Paths, ObservePath{Name: p.name, FrameLen: len(p.frame), Runs: p.batch * p.calls,
			PerToken: p.perToken, Rate: rate, Burst: max(rate/10, 1)})
		res.Samples[p.name] = map[string][]float64{}
	}
	start := time.Now()
	b.ResetTimer()
	for r := range rounds {
		for pi, p := range paths {
			for k := range ls {
				i := (k + r) % len(ls)
				l := ls[i]
				if t := variants[i].types; t != 0 {
					if err := l.mon.Set(t, res.Paths[pi].Rate, res.Paths[pi].Burst); err != nil {
						b.Fatal(err)
					}
				}
				ns, dropped, err := sampleRunsPrep(l.h.do, l.h.objs.FromEndpoint(), p.frame, p.want, p.calls, p.batch, prepOf(pi, l))
				if err != nil {
					b.Fatalf("%s, %s: %v", p.name, variants[i].name, err)
				}
				res.Paths[pi].DroppedCalls += dropped
				res.Samples[p.name][variants[i].name] = append(res.Samples[p.name][variants[i].name], ns)
			}
		}
		for _, l := range ls {
			drainReader(l.rd)
		}
	}
	b.StopTimer()
	res.Seconds = time.Since(start).Seconds()
	for i, l := range ls {
		c, err := l.mon.Counters()
		if err != nil {
			b.Fatal(err)
		}
		if c.Lost != 0 {
			b.Errorf("%s: %d events lost to a full ring", variants[i].name, c.Lost)
		}
		res.Counters = append(res.Counters, ObserveCounters{Variant: variants[i].name, Emitted: c.Emitted, Suppressed: c.Suppressed})
	}
	b.Logf("%-18s %s", "path (ns/run)", fmt.Sprint(res.Variants))
	for _, p := range res.Paths {
		line := fmt.Sprintf("%-18s", p.Name)
		for _, v := range res.Variants {
			line += fmt.Sprintf(" %8.1f", median(res.Samples[p.Name][v]))
		}
		b.Log(line)
	}
	b.Logf("events: %+v", res.Counters)
	if path := os.Getenv("XLANE_OBSERVE_JSON"); path != "" {
		js, err := json.Marshal(res)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, js, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// sampleRunsPrep is sampleRuns with prep before every call, and without
// the calls that took more than 3 times the median call's ns per run:
// the vCPU was stolen or interrupts ran (the hooks never make a call of
// 250 runs that much slower: an event written costs about a µs). dropped
// counts them.
func sampleRunsPrep(do func(func() error) error, prog *ebpf.Program, frame []byte, want int32, calls, batch int, prep func() error) (ns float64, dropped int, err error) {
	per := make([]float64, 0, calls)
	err = do(func() error {
		for range calls {
			if err := prep(); err != nil {
				return err
			}
			ret, perRun, err := prog.Benchmark(frame, batch, nil)
			if err != nil {
				return err
			}
			if int32(ret) != want {
				return fmt.Errorf("return value %d, want %d", int32(ret), want)
			}
			per = append(per, float64(perRun.Nanoseconds()))
		}
		return nil
	})
	if err != nil || len(per) == 0 {
		return 0, 0, err
	}
	limit := 3 * median(per)
	var sum float64
	kept := 0
	for _, x := range per {
		if x > limit {
			dropped++
			continue
		}
		sum += x
		kept++
	}
	return sum / float64(kept), dropped, nil
}

// synOf is f's SYN from epLo.
func synOf(tb testing.TB, f ctFlow) []byte {
	p := f.orig("S").sentBy(epLo)
	p.ttl = 255
	return p.frame(tb)
}

// clearCT deletes every conntrack entry.
func clearCT(m *ebpf.Map) error {
	var (
		k    CTKey
		v    CTVal
		keys []CTKey
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for i := range keys {
		if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// establishAll marks every conntrack entry established.
func establishAll(m *ebpf.Map) error {
	var (
		k   CTKey
		v   CTVal
		kvs = map[CTKey]CTVal{}
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		v.State = uint8(CTEstablished)
		kvs[k] = v
	}
	if err := it.Err(); err != nil {
		return err
	}
	if len(kvs) != 2 {
		return fmt.Errorf("conntrack holds %d entries after a SYN, want 2", len(kvs))
	}
	for k, v := range kvs {
		if err := m.Put(&k, &v); err != nil {
			return err
		}
	}
	return nil
}

// drainReader reads what the ring holds without waiting.
func drainReader(rd *ringbuf.Reader) {
	rd.SetDeadline(time.Now())
	for {
		if _, err := rd.Read(); err != nil {
			return
		}
	}
}

func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}
