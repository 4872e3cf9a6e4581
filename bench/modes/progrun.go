package main

// The per-packet half of -observe: the monitor's cost on xlane_from_endpoint
// measured by the kernel with BPF_PROG_RUN (internal/bpf
// BenchmarkObserveCost, run from a test binary built for the purpose),
// converted into a cost of the whole path with the end-to-end figures of
// the same run. Its noise is a few ns per packet where the end-to-end
// A/A control of a 2-core machine moves by several percent.

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/internal/bpf"
)

// ProgRunReport is the BPF_PROG_RUN part of an -observe run.
type ProgRunReport struct {
	Command string            `json:"command"`
	Result  bpf.ObserveResult `json:"result"`
	Rows    []ProgRunRow      `json:"rows"`
	// Denominators are the end-to-end figures the costs are expressed
	// against (ns of CPU per packet or per program run), by test.
	Denominators []Denominator `json:"denominators"`
}

// ProgRunRow is one path and variant: ns per run, and the difference to
// the monitor built out (off) per round.
type ProgRunRow struct {
	Path      string  `json:"path"`
	Variant   string  `json:"variant"`
	Median    float64 `json:"median_ns"`
	P10       float64 `json:"p10_ns"`
	P90       float64 `json:"p90_ns"`
	DeltaMed  float64 `json:"delta_ns"` // median over rounds of (variant - off)
	DeltaP10  float64 `json:"delta_p10_ns"`
	DeltaP90  float64 `json:"delta_p90_ns"`
	DeltaPart float64 `json:"delta_of_run"` // DeltaMed / off's median: the share of the program's own run
}

// Denominator is what a packet (or a program run) costs the whole path in
// an end-to-end test, from the reference mode's medians.
type Denominator struct {
	Test   string  `json:"test"`
	Kind   string  `json:"kind"` // rate or tcp
	Path   string  `json:"path"` // the BPF_PROG_RUN path it converts
	NS     float64 `json:"ns"`
	Source string  `json:"source"`
}

// progRunVariants: the BPF_PROG_RUN variants against off, and the A/A
// pair (on-aa against on).
var progRunVariants = []string{"on", "on-aa", "default", "all"}

// progRunTargets are issue 19's targets on BPF_PROG_RUN variants.
var progRunTargets = []struct {
	name    string
	variant string
	limit   float64
}{
	{"no listener ≤ 2 %", "on", 0.02},
	{"monitor, default types ≤ 10 %", "default", 0.10},
	{"monitor, all types ≤ 10 %", "all", 0.10},
}

// observeRef is the end-to-end mode the costs are against: the monitor
// built out, or plain tc where tc+off did not run.
func observeRef(modes []string) string {
	if slices.Contains(modes, "tc+off") {
		return "tc+off"
	}
	return "tc"
}

// perToken is, from the end-to-end results, the packets per token of the
// daemon's 1,000 events a second per CPU: on the rate test (the datapath
// on one CPU) and on the TCP tests (runs a second over the machine's
// CPUs), the median over the tests of each kind; 0 where the run has no
// figure.
func perToken(rep *Report, ref string) (udp, tcp int) {
	var udps, tcps []float64
	for _, t := range rep.Tests {
		med := func(key string) float64 { return t.median(key, ref) }
		switch t.Kind {
		case "rate":
			if mpps := med("forwarded_mpps"); mpps > 0 {
				udps = append(udps, mpps*1e6/1000)
			}
		case "tcp":
			g, msg, nsr := med("gbps"), med("bpf_ms_gbit"), med("bpf_ns_run")
			if g > 0 && msg > 0 && nsr > 0 {
				runs := g * msg * 1e6 / nsr // per second
				tcps = append(tcps, runs/float64(runtime.NumCPU())/1000)
			}
		}
	}
	if len(udps) > 0 {
		udp = int(math.Round(measure.Median(udps)))
	}
	if len(tcps) > 0 {
		tcp = int(math.Round(measure.Median(tcps)))
	}
	return udp, tcp
}

// runProgRun builds internal/bpf's test binary and runs
// BenchmarkObserveCost with rounds rounds, the listeners' rate limit at
// the run's own packets per token.
func runProgRun(ctx context.Context, tmp string, rounds int, rep *Report) (*ProgRunReport, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tmp, "bpf.test")
	log.Printf("BPF_PROG_RUN: go test -c ./internal/bpf")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./internal/bpf")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build internal/bpf's test binary: %w\n%s", err, out)
	}
	js := filepath.Join(tmp, "observe-progrun.json")
	env := []string{"XLANE_OBSERVE_JSON=" + js, "XLANE_OBSERVE_ROUNDS=" + strconv.Itoa(rounds)}
	udp, tcp := perToken(rep, observeRef(rep.Config.Modes))
	if udp > 0 {
		env = append(env, "XLANE_OBSERVE_UDP_PER_TOKEN="+strconv.Itoa(udp))
	}
	if tcp > 0 {
		env = append(env, "XLANE_OBSERVE_TCP_PER_TOKEN="+strconv.Itoa(tcp))
	}
	argv := []string{bin, "-test.run", "^$", "-test.bench", "^BenchmarkObserveCost$", "-test.benchtime", "1x", "-test.count", "1"}
	cmdline := strings.Join(env, " ") + " " + strings.Join(argv, " ")
	log.Printf("BPF_PROG_RUN: %s", cmdline)
	run := exec.CommandContext(ctx, argv[0], argv[1:]...)
	run.Dir = filepath.Join(root, "internal", "bpf")
	run.Env = append(os.Environ(), env...)
	out, err := run.CombinedOutput()
	os.WriteFile(filepath.Join(tmp, "observe-progrun.log"), out, 0o644)
	if err != nil {
		return nil, fmt.Errorf("BenchmarkObserveCost: %w\n%s", err, out)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		return nil, fmt.Errorf("BenchmarkObserveCost wrote no result: %w\n%s", err, out)
	}
	pr := &ProgRunReport{Command: "internal/bpf BenchmarkObserveCost: " + cmdline}
	if err := json.Unmarshal(b, &pr.Result); err != nil {
		return nil, fmt.Errorf("decode %s: %w", js, err)
	}
	pr.Rows = progRunRows(pr.Result)
	pr.Denominators = denominators(rep, observeRef(rep.Config.Modes))
	return pr, nil
}

// moduleRoot is the directory of xlane's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	gomod, err := harness.Run(ctx, "go", "env", "GOMOD")
	gomod = strings.TrimSpace(gomod)
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run from inside the xlane module (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// quantile is the q-quantile of xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[int(math.Round(q*float64(len(s)-1)))]
}

// diffs are a[i] - b[i] per round.
func diffs(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		out = append(out, a[i]-b[i])
	}
	return out
}

// progRunRows summarizes the samples: per path, off and every variant.
func progRunRows(r bpf.ObserveResult) []ProgRunRow {
	var rows []ProgRunRow
	for _, p := range r.Paths {
		s := r.Samples[p.Name]
		off := s["off"]
		if len(off) == 0 {
			continue
		}
		offMed := measure.Median(off)
		for _, v := range append([]string{"off"}, progRunVariants...) {
			xs := s[v]
			if len(xs) == 0 {
				continue
			}
			row := ProgRunRow{Path: p.Name, Variant: v, Median: measure.Median(xs), P10: quantile(xs, 0.1), P90: quantile(xs, 0.9)}
			ref := off
			if v == "on-aa" { // the A/A pair: against on
				ref = s["on"]
			}
			if v != "off" && len(ref) > 0 {
				d := diffs(xs, ref)
				row.DeltaMed, row.DeltaP10, row.DeltaP90 = measure.Median(d), quantile(d, 0.1), quantile(d, 0.9)
				row.DeltaPart = row.DeltaMed / offMed
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// denominators are the run's ns of CPU per packet: the rate test's per
// forwarded packet (its datapath has one CPU: 1,000 / Mpps), each TCP
// test's per program run (CPU-s per Gbit / program runs per Gbit); ref's
// medians.
func denominators(rep *Report, ref string) []Denominator {
	var out []Denominator
	for _, t := range rep.Tests {
		med := func(key string) float64 { return t.median(key, ref) }
		switch t.Kind {
		case "rate":
			if mpps := med("forwarded_mpps"); mpps > 0 {
				out = append(out, Denominator{Test: t.Title, Kind: "rate", Path: "udp-60B-forward", NS: 1000 / mpps,
					Source: fmt.Sprintf("%s forwarded %.3f Mpps on one CPU: %.0f ns per packet", ref, mpps, 1000/mpps)})
			}
		case "tcp":
			cpu, msg, nsr := med("cpu_s_per_gbit"), med("bpf_ms_gbit"), med("bpf_ns_run")
			if cpu > 0 && msg > 0 && nsr > 0 {
				runs := msg * 1e6 / nsr // program runs per Gbit
				out = append(out, Denominator{Test: t.Title, Kind: "tcp", Path: "tcp-established", NS: cpu * 1e9 / runs,
					Source: fmt.Sprintf("%s %.3f CPU-s/Gbit over %.0f program runs/Gbit (%.2f BPF ms/Gbit at %.1f ns/run): %.0f ns of CPU per run",
						ref, cpu, runs, msg, nsr, cpu*1e9/runs)})
			}
		}
	}
	return out
}

// judgeProgRun applies the targets to the BPF_PROG_RUN rows, once per
// denominator: cost = the median over rounds of (variant - off) / the
// denominator; its A/A noise the larger of |p10| and |p90| of (on-aa -
// on) / the denominator over the rounds (the 80 % band: a round's sample
// is a few ms, one preemption away from an outlier). Resolved where that
// noise is below the target.
func judgeProgRun(pr *ProgRunReport) []Verdict {
	if pr == nil {
		return nil
	}
	var out []Verdict
	for _, tg := range progRunTargets {
		for _, d := range pr.Denominators {
			s := pr.Result.Samples[d.Path]
			off, on, aa, v := s["off"], s["on"], s["on-aa"], s[tg.variant]
			if len(off) == 0 || len(v) == 0 || len(on) == 0 || len(aa) == 0 || d.NS <= 0 {
				continue
			}
			var cs, an []float64
			for _, x := range diffs(v, off) {
				cs = append(cs, x/d.NS)
			}
			for _, x := range diffs(aa, on) {
				an = append(an, x/d.NS)
			}
			vd := Verdict{Target: tg.name, Test: "BPF_PROG_RUN " + d.Path + " over " + d.Test, Metric: "ns per packet / path's ns per packet",
				Cost: measure.Median(cs), Costs: cs, AANoise: math.Max(math.Abs(quantile(an, 0.1)), math.Abs(quantile(an, 0.9))),
				Kind: "prog_run", Note: d.Source}
			switch {
			case len(cs) < minVerdictReps:
				vd.Result = "not resolved"
			case vd.AANoise >= tg.limit:
				vd.Result = "not resolved"
			case vd.Cost <= tg.limit:
				vd.Result = "met"
			default:
				vd.Result = "missed"
			}
			out = append(out, vd)
		}
	}
	return out
}

// progRunLines are the BPF_PROG_RUN table as text lines (md: markdown).
func progRunLines(pr *ProgRunReport, md bool) []string {
	header := []string{"path", "variant", "ns/run (p10–p90)", "Δ vs off, ns (p10–p90)", "Δ / off's run"}
	var rows [][]string
	for _, r := range pr.Rows {
		delta, part := "-", "-"
		if r.Variant != "off" {
			vs := "off"
			if r.Variant == "on-aa" {
				vs = "on (A/A)"
			}
			delta = fmt.Sprintf("%+.1f (%+.1f – %+.1f) vs %s", r.DeltaMed, r.DeltaP10, r.DeltaP90, vs)
			part = fmt.Sprintf("%+.1f %%", 100*r.DeltaPart)
		}
		rows = append(rows, []string{r.Path, r.Variant, fmt.Sprintf("%.1f (%.1f–%.1f)", r.Median, r.P10, r.P90), delta, part})
	}
	var out []string
	if md {
		out = append(out, "| "+strings.Join(header, " | ")+" |", "|---|---|---:|---:|---:|")
		for _, r := range rows {
			out = append(out, "| "+strings.Join(r, " | ")+" |")
		}
	} else {
		w := make([]int, len(header))
		for _, r := range append([][]string{header}, rows...) {
			for i, c := range r {
				w[i] = max(w[i], len([]rune(c)))
			}
		}
		for _, r := range append([][]string{header}, rows...) {
			var b strings.Builder
			for i, c := range r {
				fmt.Fprintf(&b, "%-*s  ", w[i], c)
			}
			out = append(out, strings.TrimRight(b.String(), " "))
		}
	}
	var paths []string
	for _, p := range pr.Result.Paths {
		lim := "the daemon's 1,000 events/s per CPU"
		if p.PerToken > 0 {
			lim = fmt.Sprintf("a token per %d runs (rate %d/s, burst %d)", p.PerToken, p.Rate, p.Burst)
		}
		paths = append(paths, fmt.Sprintf("%s (%d-byte frame, %d runs per sample, %d slow calls left out; listeners: %s)", p.Name, p.FrameLen, p.Runs, p.DroppedCalls, lim))
	}
	var evs []string
	for _, c := range pr.Result.Counters {
		if c.Emitted+c.Suppressed > 0 {
			evs = append(evs, fmt.Sprintf("%s %d emitted, %d suppressed", c.Variant, c.Emitted, c.Suppressed))
		}
	}
	out = append(out, "",
		fmt.Sprintf("%d rounds in %.0f s, variants interleaved (rotated each round), each its own load of the objects; medians and p10–p90 over the rounds. "+
			"off: the monitor built out (xlaned --monitor=false); on: the hooks, no listener; on-aa: on loaded again (the A/A control); "+
			"default / all: a listener with the default types / every type. Paths: %s. Events: %s.",
			pr.Result.Rounds, pr.Result.Seconds, strings.Join(paths, "; "), strings.Join(evs, "; ")))
	for _, d := range pr.Denominators {
		out = append(out, fmt.Sprintf("path cost of %s: %s", d.Test, d.Source))
	}
	return out
}
