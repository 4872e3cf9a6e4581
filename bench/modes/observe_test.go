package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

func TestPairedRatio(t *testing.T) {
	// Repetition 3 has a zero denominator (no ratio); the lone extra
	// sample of a has no partner.
	pr, ok := pairedRatio([]float64{2, 4, 5, 9, 7}, []float64{1, 2, 0, 3})
	if !ok {
		t.Fatal("pairedRatio: no ratio")
	}
	if want := []float64{2, 2, 3}; !slices.Equal(pr.Samples, want) {
		t.Errorf("samples = %v, want %v", pr.Samples, want)
	}
	if pr.Median != 2 || pr.Min != 2 || pr.Max != 3 {
		t.Errorf("median/min/max = %v/%v/%v, want 2/2/3", pr.Median, pr.Min, pr.Max)
	}
	if _, ok := pairedRatio([]float64{1}, []float64{0}); ok {
		t.Error("pairedRatio of a zero denominator: ok, want none")
	}
}

func TestAddRunStats(t *testing.T) {
	t0 := time.Now()
	a := runStats{runs: 100, ns: 50_000, ctlCPU: 10 * time.Millisecond, at: t0}
	b := runStats{runs: 1100, ns: 650_000, ctlCPU: 30 * time.Millisecond, at: t0.Add(2 * time.Second)}
	s := Sample{}
	if err := addRunStats(s, a, b, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if s["bpf_ns_run"] != 600 || s["ctl_cpu_ms_s"] != 10 {
		t.Errorf("bpf_ns_run %v, ctl_cpu_ms_s %v; want 600, 10", s["bpf_ns_run"], s["ctl_cpu_ms_s"])
	}
	if _, ok := s["bpf_ms_gbit"]; ok {
		t.Error("bpf_ms_gbit without a throughput")
	}
	// TCP: 0.6 ms of program time over 2 s at 0.15 Gbit/s = 2 ms/Gbit.
	s = Sample{"gbps": 0.15}
	if err := addRunStats(s, a, b, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if v := s["bpf_ms_gbit"]; v < 1.999 || v > 2.001 {
		t.Errorf("bpf_ms_gbit %v, want 2", v)
	}
	// No runs: statistics off, or the wrong programs; an error, not 0 ns.
	if err := addRunStats(Sample{}, a, a, time.Second); err == nil {
		t.Error("addRunStats without runs: no error")
	}
}

func TestProcCPU(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// 150 ms of spinning: at least a tick's worth even on a loaded CPU.
	if d := after - before; d < 10*time.Millisecond {
		t.Errorf("procCPU grew by %v over 150 ms of spinning", d)
	}
	if _, err := procCPU(1 << 30); err == nil {
		t.Error("procCPU of a pid that does not exist: no error")
	}
}

func TestObserveFlags(t *testing.T) {
	args, cpus := os.Args, iperfServer.cpus
	t.Cleanup(func() { os.Args, observing, reportName, iperfServer.cpus = args, false, "modes", cpus })
	os.Args = []string{"modes", "-observe", "-reps", "3"}
	o, err := parseFlags()
	if err != nil {
		t.Fatal(err)
	}
	// -reps as given, the other two -observe's defaults.
	if o.Reps != 3 || o.Duration != 2*time.Second || o.rateDur != time.Second || o.progRunRounds != 41 {
		t.Errorf("reps %d, duration %v, rate-duration %v, progrun-rounds %d; want 3, 2s, 1s, 41", o.Reps, o.Duration, o.rateDur, o.progRunRounds)
	}
	if want := []string{"tc", "tc+aa", "tc+off", "tc+metrics", "tc+monitor", "tc+monitor-all", "tc+hubble"}; !slices.Equal(o.modes, want) {
		t.Errorf("modes %v, want %v", o.modes, want)
	}
	if !observing || reportName != "observe" || iperfServer.cpus != observeServerCPU {
		t.Errorf("observing %v, reportName %q, iperf3 server CPUs %q", observing, reportName, iperfServer.cpus)
	}
	for _, ts := range tests(o.mtus) {
		if ts.Kind == "tcp" && (ts.ClientCPUs != observeClientCPU || ts.ServerCPUs != observeServerCPU) {
			t.Errorf("%s: client CPUs %q, server CPUs %q", ts.ID, ts.ClientCPUs, ts.ServerCPUs)
		}
		if ms := ts.Metrics(); ts.Kind != "latency" && ms[len(ms)-1].Key != "ctl_cpu_ms_s" {
			t.Errorf("%s: metrics %v lack -observe's", ts.ID, ms)
		}
	}
}

func TestJudge(t *testing.T) {
	// Against tc+off. Rate row: tc 0.99 of tc+off (+1 % cost), A/A within
	// 1 %: met; monitor-all 0.85: +17.6 %, missed. TCP row: A/A noise
	// 20 %: not resolved.
	rate := TestResult{Test: Test{Kind: "rate", Title: "rate"}, Metrics: []MetricResult{
		{Metric: Metric{Key: "forwarded_mpps", Label: "Mpps", HigherBetter: true}, Modes: map[string]ModeStat{
			"tc+off": {Samples: []float64{1, 1, 1}}, "tc": {Samples: []float64{0.99, 0.99, 0.99}},
			"tc+aa": {Samples: []float64{0.99, 1.0, 0.985}}, "tc+monitor-all": {Samples: []float64{0.85, 0.85, 0.85}}}},
		{Metric: Metric{Key: "delivered_pct", HigherBetter: true}, Modes: map[string]ModeStat{
			"tc+off": {Median: 90}, "tc": {Median: 80}, "tc+monitor-all": {Median: 80}}},
	}}
	tcp := TestResult{Test: Test{Kind: "tcp", Title: "tcp"}, Metrics: []MetricResult{
		{Metric: Metric{Key: "cpu_s_per_gbit", Label: "CPU-s/Gbit"}, Modes: map[string]ModeStat{
			"tc+off": {Samples: []float64{1, 1, 1}}, "tc": {Samples: []float64{1, 1, 1}},
			"tc+aa": {Samples: []float64{1.2, 1, 1}}, "tc+monitor-all": {Samples: []float64{1, 1, 1}}}},
	}}
	vs := judge(&Report{Tests: []TestResult{rate, tcp}})
	got := map[string]string{}
	for _, v := range vs {
		got[v.Target+"/"+v.Test] = v.Result
	}
	want := map[string]string{
		"no listener ≤ 2 %/rate":         "met",
		"no listener ≤ 2 %/tcp":          "not resolved",
		"monitor, all types ≤ 10 %/rate": "missed",
		"monitor, all types ≤ 10 %/tcp":  "not resolved",
	}
	if len(got) != len(want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	for _, v := range vs {
		if noted := v.Metric == "Mpps"; noted != (v.Note != "") {
			t.Errorf("%s/%s: note %q", v.Target, v.Test, v.Note)
		}
	}
	// Two repetitions: no verdict, whatever the numbers.
	short := TestResult{Test: Test{Kind: "tcp", Title: "short"}, Metrics: []MetricResult{
		{Metric: Metric{Key: "cpu_s_per_gbit", Label: "CPU-s/Gbit"}, Modes: map[string]ModeStat{
			"tc+off": {Samples: []float64{1, 1}}, "tc": {Samples: []float64{1, 1}}, "tc+aa": {Samples: []float64{1, 1}}, "tc+monitor-all": {Samples: []float64{2, 2}}}},
	}}
	if sv := judge(&Report{Tests: []TestResult{short}}); len(sv) != 2 || sv[0].Result != "not resolved" || sv[1].Result != "not resolved" {
		t.Errorf("2 repetitions: %+v, want two not resolved", sv)
	}
	if len(verdictLines(vs)) != len(vs) {
		t.Error("verdictLines: one line per verdict")
	}
}

// TestBaseVariants: a variant@base is the variant (its daemon flags and
// observer) on the -baseline build, and names that build.
func TestBaseVariants(t *testing.T) {
	for _, c := range []struct{ mode, variant string }{
		{"tc@base", ""}, {"tc+monitor-all@base", "monitor-all"}, {"tc+metrics@base", "metrics"}, {"tc+monitor-all", "monitor-all"},
	} {
		x := newXlane(c.mode, "r", 200, []int{1500}, "/bins", "/tmp")
		if x.mode != "tc" || x.variant != c.variant {
			t.Errorf("%s: mode %q variant %q, want tc and %q", c.mode, x.mode, x.variant, c.variant)
		}
		if strings.HasSuffix(c.mode, "@base") {
			x.ref = "abc123"
		}
		if d := x.Describe(); strings.Contains(d, "built from abc123") != (x.ref != "") {
			t.Errorf("%s: Describe %q: the build's ref missing or extra", c.mode, d)
		}
	}
	if _, err := harness.ParseChoices("modes", "tc,tc+monitor-all,tc+monitor-all@base", append(allModes, observeModes...)); err != nil {
		t.Errorf("-modes with a variant@base: %v", err)
	}
}
