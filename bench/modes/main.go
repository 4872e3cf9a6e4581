// Command modes is the datapath modes benchmark (`make bench BENCH=modes`): container
// to container on one node, comparing a Docker-style bridge baseline with
// xlane's kernel, tc, xdp-generic and xdp modes in one interleaved run:
// TCP throughput and CPU cost (iperf3, IPv4 and IPv6; tc-bigtcp is tc with
// BIG TCP on), ping-pong latency (sockperf) and
// the 64-byte UDP forwarding rate (a BPF_PROG_RUN live-frames generator,
// see bench/gen, bench/internal/rate and rate.go).
//
//	go run ./bench/modes -out bench/results    # default: 3 reps of 4/3/2 s runs, ~11 min
//	go run ./bench/modes -quick                # 1 rep, 2 s runs, for development
//	go run ./bench/modes -quick -only rate -modes kernel,xdp
//
// It needs root, iproute2, nsenter, ethtool, iptables(-nft), iperf3,
// sockperf, ss, ping and a bpffs at /sys/fs/bpf. It builds xlaned and xlane itself, makes
// every namespace it uses (named xlb-<random>-...), and removes them, its
// processes and its bpffs pin dirs on exit, ^C included. It exits non-zero
// only when the harness fails (setup, a missing tool, no connection), never
// because of the numbers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/bench/internal/rate"
)

// allModes are the paths compared: the Docker-style bridge and xlane's
// datapath modes.
var allModes = []string{"docker", "kernel", "tc", "tc-bigtcp", "xdp-generic", "xdp"}

type options struct {
	harness.RunFlags               // Duration: iperf3
	latDur           time.Duration // sockperf
	rateDur          time.Duration // rate generator
	modes            []string
	mtus             []int
	only             string
	observe          bool   // observe.go: the observability variants of tc
	baseline         string // observe.go: git ref of tc@base
	progRunRounds    int    // progrun.go: BPF_PROG_RUN rounds (0: none)
}

func parseFlags() (options, error) {
	var o options
	var modes, mtus string
	o.Register(flag.CommandLine, harness.RunFlagsUsage{
		Quick:           "development run: 1 repetition, 2 s runs (unless -reps or a duration is given)",
		Reps:            "repetitions; each runs every test once per mode, modes interleaved",
		Duration:        "length of each iperf3 run (whole seconds)",
		DefaultDuration: 4 * time.Second,
		Out:             "directory for modes-<date>.json, modes-latest.md and modes-latest.svg",
		DefaultOut:      "bench/results",
		KeepTmp:         "keep the temp dir (binaries, daemon and server logs)",
	})
	flag.DurationVar(&o.latDur, "latency-duration", 3*time.Second, "length of each sockperf run (whole seconds)")
	flag.DurationVar(&o.rateDur, "rate-duration", 2*time.Second, "length of each rate run (generator time)")
	flag.StringVar(&modes, "modes", strings.Join(allModes, ","), "modes to compare, in run order")
	flag.StringVar(&mtus, "mtus", "1500,9000", "MTUs; one network per MTU in every mode")
	flag.StringVar(&o.only, "only", "", "run only tests whose ID contains this (e.g. latency, tcp-4x, mtu9000, rate)")
	flag.BoolVar(&o.observe, "observe", false, "the cost of observability on the tc path (observe.go): modes "+observeDefault+
		" (+ tc@base with -baseline), MTU 1500, TCP and the 64-byte rate, iperf3 pinned, modes rotated per repetition, "+
		"per-repetition ratios, BPF run time per run (bpf_stats on for the run), then BPF_PROG_RUN per packet (-progrun-rounds); defaults -reps 5 -duration 2s -rate-duration 1s (~12 min for six modes, a seventh since tc+hubble); results in observe-*")
	flag.StringVar(&o.baseline, "baseline", "", "with -observe: also run tc@base, xlaned built from this git ref (e.g. the commit before the monitor); "+
		"-modes may name tc+metrics@base, tc+monitor@base, tc+monitor-all@base too (the variant on that build)")
	flag.IntVar(&o.progRunRounds, "progrun-rounds", 41, "with -observe: rounds of the per-packet BPF_PROG_RUN measurement after the end-to-end tests (progrun.go; ~1 s each, -quick 5); 0 skips it")
	// flag.CommandLine exits on a bad flag (status 2) and on -h (status 0).
	quick := map[string]string{"reps": "1", "duration": "2s", "latency-duration": "2s", "rate-duration": "2s", "progrun-rounds": "5"}
	if err := o.Parse(flag.CommandLine, os.Args[1:], quick); err != nil {
		return o, err
	}
	if o.observe {
		if err := observeFlags(&o); err != nil {
			return o, err
		}
	}
	if o.Reps < 1 || o.Duration < time.Second || o.latDur < time.Second || o.rateDur < 500*time.Millisecond {
		return o, errors.New("-reps must be >= 1, -duration and -latency-duration >= 1s, -rate-duration >= 500ms")
	}
	if o.observe {
		observeSetup()
		if !flagSet("modes") {
			modes = observeDefault
			if o.baseline != "" {
				modes += ",tc@base"
			}
		}
		if !flagSet("mtus") {
			mtus = "1500"
		}
	}
	var err error
	if o.modes, err = harness.ParseChoices("modes", modes, append(allModes, observeModes...)); err != nil {
		return o, err
	}
	for _, s := range strings.Split(mtus, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1280 || n > 65000 {
			return o, fmt.Errorf("-mtus: %q: want numbers between 1280 and 65000", s)
		}
		o.mtus = append(o.mtus, n)
	}
	return o, nil
}

// flagSet reports whether the command line gave flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	os.Exit(realMain())
}

func realMain() (code int) {
	o, err := parseFlags()
	if err != nil {
		log.Print(err)
		return 2
	}
	if err := preflight(); err != nil {
		log.Print(err)
		return 1
	}

	return harness.Main("", o.KeepTmp, func(ctx context.Context, tmp string, cleanup *harness.UndoStack) error {
		rep, err := benchmark(ctx, o, tmp, cleanup)
		if err != nil {
			return err
		}
		printTable(os.Stdout, rep)
		paths, err := writeReports(o.Out, rep)
		if err != nil {
			return fmt.Errorf("write results: %w", err)
		}
		fmt.Printf("\nresults: %s\n", strings.Join(paths, ", "))
		return nil
	})
}

func benchmark(ctx context.Context, o options, tmp string, cleanup *harness.UndoStack) (*Report, error) {
	rep := &Report{Started: time.Now(), Machine: harness.DescribeMachine(ctx)}
	rep.Config = RunConfig{
		Repetitions: o.Reps, Modes: o.modes, MTUs: o.mtus,
		Duration: fmt.Sprintf("iperf3 %s, sockperf %s, rate %s", o.Duration, o.latDur, o.rateDur),
		Order:    "per repetition, per test: " + strings.Join(o.modes, ", ") + " (interleaved)",
		Pinning: "iperf3 not pinned (pinning made throughput no steadier in trials); sockperf client pinned to CPU " + latencyClientCPU +
			", server pinned to the same CPU or to CPU 1 (two tests): unpinned ping-pong latency is bimodal on this VM " +
			"(~7 us on one core, ~35 us across cores, the cross-core wakeup dominating); " +
			fmt.Sprintf("rate tests: generator thread pinned to CPU %d (SCHED_FIFO %d); the datapath on CPU %d at SCHED_FIFO %d "+
				"(the client host veth's NAPI threaded and pinned there, or its backlog steered there by RPS with ksoftirqd/%d raised): "+
				"ahead of other processes, as softirq processing would be; RT throttling leaves others 5%%",
				rate.GenCPU, rate.GenPriority, rate.NAPICPU, rate.NAPIPriority, rate.NAPICPU),
		RateMethod: rateMethod,
		CPUMethod:  "/proc/stat busy (all but idle+iowait) over all cores during each iperf3 client run; machine-wide, so other load counts",
	}
	log.Printf("machine: kernel %s, nproc %d, %s", rep.Machine.Kernel, rep.Machine.NProc, rep.Machine.CPUModel)

	if observing {
		rep.Config.Pinning = fmt.Sprintf("iperf3 client pinned to CPU %s (the datapath runs there: a veth transmit processes the peer's receive on the sending CPU), "+
			"server to CPU %s; xlaned and the monitor client not pinned (their cost is part of what is measured); ", observeClientCPU, observeServerCPU) +
			strings.SplitN(rep.Config.Pinning, "; ", 2)[1]
		rep.Config.Order = "per repetition, per test: " + strings.Join(o.modes, ", ") + ", rotated by one mode each repetition (interleaved)"
		rep.Config.CPUMethod += "; BPF ns/run: run time / run count of the topology's own programs (those of the links pinned under its pin dir) " +
			"over the measurement, from bpf_stats, held on (BPF_ENABLE_STATS) for the whole run in every mode; " +
			"xlaned+client CPU ms/s: utime+stime of xlaned and of the xlane monitor client (/proc/PID/stat) per second of the measurement " +
			"(the metrics scraper runs inside the bench and is not counted)"
		c, err := enableRunStats()
		if err != nil {
			return nil, err
		}
		defer c.Close()
	}

	bins, runID, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return nil, err
	}

	var topos []Topology
	builtBase := false
	for i, mode := range o.modes {
		var t Topology
		switch {
		case mode == "docker":
			t = newDocker(runID, 200+i, o.mtus)
		case strings.HasSuffix(mode, "@base"):
			if o.baseline == "" {
				return nil, fmt.Errorf("mode %s needs -baseline REF", mode)
			}
			base := filepath.Join(tmp, "bin-base")
			if !builtBase {
				if err := buildBaseline(ctx, o.baseline, base); err != nil {
					return nil, err
				}
				builtBase = true
			}
			x := newXlane(mode, runID, 200+i, o.mtus, base, tmp)
			x.ref = o.baseline
			t = x
		default:
			t = newXlane(mode, runID, 200+i, o.mtus, bins, tmp)
		}
		cleanup.Push("tear down "+mode, func(context.Context) error { return t.Teardown() })
		log.Printf("setup %s", mode)
		if err := t.Setup(ctx); err != nil {
			return nil, fmt.Errorf("setup %s: %w", mode, err)
		}
		for _, mtu := range o.mtus {
			for _, p := range []harness.Pair{t.Pair(mtu), t.Pair6(mtu)} {
				if err := checkPath(ctx, p); err != nil {
					return nil, fmt.Errorf("%s: %w", mode, err)
				}
				if err := startServers(ctx, t, p, tmp); err != nil {
					return nil, fmt.Errorf("%s: %w", mode, err)
				}
			}
		}
		topos = append(topos, t)
		rep.Topologies = append(rep.Topologies, TopoInfo{Mode: mode, Describe: t.Describe()})
	}

	var ts []Test
	for _, t := range tests(o.mtus) {
		// -observe: TCP and the 64-byte rate, the benchmark.
		if observing && t.Kind == "latency" && !strings.Contains(o.only, "latency") {
			continue
		}
		if strings.Contains(t.ID, o.only) {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("-only %q matches no test", o.only)
	}
	res := results{}
	total, n := o.Reps*len(ts)*len(topos), 0
	for r := 1; r <= o.Reps; r++ {
		for _, test := range ts {
			for k := range topos {
				t := topos[k]
				if observing { // rotate: no mode always runs first or after the same one
					t = topos[(k+r-1)%len(topos)]
				}
				n++
				var s Sample
				var err error
				x, _ := t.(*xlaneTopo)
				var before runStats
				if observing && x != nil {
					if before, err = x.runStats(); err != nil {
						return nil, err
					}
				}
				if test.Kind == "rate" {
					var det RateDetail
					s, det, err = runRate(ctx, t, t.Pair(test.MTU), test.Source, o.rateDur, r)
					rep.Rate = append(rep.Rate, det)
				} else {
					d := o.Duration
					if test.Kind == "latency" {
						d = o.latDur
					}
					p := t.Pair(test.MTU)
					if test.IPv6 {
						p = t.Pair6(test.MTU)
					}
					s, err = test.Run(ctx, p, d)
				}
				if err == nil && observing && x != nil && test.Kind != "latency" {
					var after runStats
					if after, err = x.runStats(); err == nil {
						err = addRunStats(s, before, after, o.Duration)
					}
				}
				if err != nil {
					return nil, fmt.Errorf("%s %s (rep %d): %w", test.ID, t.Name(), r, err)
				}
				res.add(test.ID, t.Name(), s)
				log.Printf("[%d/%d] rep %d %-19s %-6s %s", n, total, r, test.ID, t.Name(), brief(test, s))
			}
		}
	}
	rep.Tests = summarize(ts, o.modes, res)
	if observing {
		if o.progRunRounds > 0 {
			if rep.ProgRun, err = runProgRun(ctx, tmp, o.progRunRounds, rep); err != nil {
				return nil, err
			}
		}
		rep.Verdicts = append(judge(rep), judgeProgRun(rep.ProgRun)...)
	}
	for _, t := range topos {
		rep.Notes = append(rep.Notes, t.Notes(ctx)...)
		p := t.Pair(o.mtus[0])
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: offloads of the client's %s (container side, ethtool -k): %s; of its host veth %s: %s",
			t.Name(), p.ClientIf, offloadSummary(ctx, p.Client, p.ClientIf), p.ClientHostIf, offloadSummary(ctx, p.Node, p.ClientHostIf)))
		rep.Notes = append(rep.Notes, checksumNote(ctx, t.Name(), p))
	}
	rep.Notes = append(rep.Notes, rateNotes(rep.Rate, o.modes)...)
	rep.Machine.LoadEnd = harness.LoadAvg()
	if load1, _, _ := strings.Cut(rep.Machine.LoadStart, " "); measure.ParseFloat(load1) > 0.5*float64(runtime.NumCPU()) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("machine: loadavg was %s at the start and %s at the end (%d CPUs): other load ran alongside; expect noise",
			rep.Machine.LoadStart, rep.Machine.LoadEnd, runtime.NumCPU()))
	}
	rep.Finished = time.Now()
	return rep, nil
}

// brief is a progress line's numbers.
func brief(t Test, s Sample) string {
	if v, ok := s["bpf_ns_run"]; ok {
		return briefKind(t, s) + fmt.Sprintf("  bpf %.1f ns/run  ctl %.1f ms/s", v, s["ctl_cpu_ms_s"])
	}
	return briefKind(t, s)
}

func briefKind(t Test, s Sample) string {
	switch t.Kind {
	case "tcp":
		return fmt.Sprintf("%6.2f Gbit/s  cpu %5.1f%%  %.3f CPU-s/Gbit  retr %.0f", s["gbps"], s["cpu_busy_pct"], s["cpu_s_per_gbit"], s["retransmits"])
	case "rate":
		return fmt.Sprintf("forwarded %.3f Mpps of %.3f offered (%.1f%%)", s["forwarded_mpps"], s["offered_mpps"], s["delivered_pct"])
	}
	return fmt.Sprintf("avg %.2f µs  p50 %.2f µs  p99 %.2f µs", s["avg_us"], s["p50_us"], s["p99_us"])
}

// preflight checks what the harness needs before touching anything.
func preflight() error {
	return harness.Preflight("network namespaces, BPF", true,
		"go", "ip", "nsenter", "ethtool", "iptables-restore", "iptables-save", "ip6tables-restore", "iperf3", "sockperf", "ss", "ping")
}

// checksumNote reports the receive checksum errors the containers' stacks
// counted over the whole run (both networks): a datapath that loses
// CHECKSUM_PARTIAL state (which a native XDP redirect loses; see
// bpf/lib/l4csum.h) shows up here.
func checksumNote(ctx context.Context, mode string, p harness.Pair) string {
	var parts []string
	for _, c := range []struct{ name, ns string }{{"server", p.Server}, {"client", p.Client}} {
		out, err := harness.Run(ctx, harness.NSExec(c.ns, "cat", "/proc/net/snmp")...)
		if err != nil {
			return fmt.Sprintf("%s: /proc/net/snmp: %v", mode, err)
		}
		s := measure.ParseSNMP(out)
		parts = append(parts, fmt.Sprintf("%s Tcp InCsumErrors %d, Udp InCsumErrors %d, Tcp RetransSegs %d, Tcp InSegs %d",
			c.name, s["Tcp:InCsumErrors"], s["Udp:InCsumErrors"], s["Tcp:RetransSegs"], s["Tcp:InSegs"]))
	}
	return fmt.Sprintf("%s: receive checksum errors over the run (container netns): %s", mode, strings.Join(parts, "; "))
}
