package main

import (
	"math"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// progRunFixture: an end-to-end run (tc+off forwarding 2 Mpps on the rate
// test: 500 ns per packet; TCP at 10 Gbit/s, 0.1 CPU-s/Gbit, 5 BPF
// ms/Gbit at 250 ns/run: 20,000 runs per Gbit, 5,000 ns of CPU per run)
// and BPF_PROG_RUN samples of 5 rounds.
func progRunFixture() (*Report, bpf.ObserveResult) {
	rep := &Report{Config: RunConfig{Modes: []string{"tc", "tc+aa", "tc+off"}}, Tests: []TestResult{
		{Test: Test{Kind: "rate", Title: "rate"}, Metrics: []MetricResult{
			{Metric: Metric{Key: "forwarded_mpps"}, Modes: map[string]ModeStat{"tc+off": {Median: 2}}}}},
		{Test: Test{Kind: "tcp", Title: "tcp"}, Metrics: []MetricResult{
			{Metric: Metric{Key: "gbps"}, Modes: map[string]ModeStat{"tc+off": {Median: 10}}},
			{Metric: Metric{Key: "cpu_s_per_gbit"}, Modes: map[string]ModeStat{"tc+off": {Median: 0.1}}},
			{Metric: Metric{Key: "bpf_ms_gbit"}, Modes: map[string]ModeStat{"tc+off": {Median: 5}}},
			{Metric: Metric{Key: "bpf_ns_run"}, Modes: map[string]ModeStat{"tc+off": {Median: 250}}}}},
	}}
	r := bpf.ObserveResult{Rounds: 5, Variants: []string{"off", "on", "on-aa", "default", "all"},
		Paths: []bpf.ObservePath{{Name: "udp-60B-forward"}, {Name: "tcp-established"}},
		Samples: map[string]map[string][]float64{
			// UDP: on +2 ns (0.4 % of 500), A/A within ±1 ns; all +60 ns
			// (12 %): missed; default +5 ns.
			"udp-60B-forward": {
				"off": {300, 300, 300, 300, 300}, "on": {302, 302, 302, 302, 302}, "on-aa": {303, 301, 302, 302, 302},
				"default": {305, 305, 305, 305, 305}, "all": {360, 360, 360, 360, 360}},
			// TCP: A/A moves by 600 ns (12 % of 5,000): nothing resolved.
			"tcp-established": {
				"off": {300, 300, 300, 300, 300}, "on": {300, 300, 300, 300, 300}, "on-aa": {900, 300, 300, 300, -300},
				"default": {300, 300, 300, 300, 300}, "all": {310, 310, 310, 310, 310}},
		}}
	return rep, r
}

func TestProgRunJudge(t *testing.T) {
	rep, r := progRunFixture()
	udp, tcp := perToken(rep, observeRef(rep.Config.Modes))
	// 2 Mpps at 1,000 events/s: 2,000; TCP: 10 Gbit/s × 20,000 runs/Gbit
	// over the CPUs, per 1,000.
	if udp != 2000 || tcp <= 0 {
		t.Errorf("perToken: udp %d, tcp %d; want 2000 and > 0", udp, tcp)
	}
	pr := &ProgRunReport{Result: r, Rows: progRunRows(r), Denominators: denominators(rep, "tc+off")}
	if len(pr.Denominators) != 2 || pr.Denominators[0].NS != 500 || math.Abs(pr.Denominators[1].NS-5000) > 1e-6 {
		t.Fatalf("denominators %+v, want 500 ns (rate) and 5,000 ns (tcp)", pr.Denominators)
	}
	got := map[string]string{}
	for _, v := range judgeProgRun(pr) {
		got[v.Target+"/"+v.Test] = v.Result
		if v.Kind != "prog_run" {
			t.Errorf("%s: kind %q", v.Target, v.Kind)
		}
	}
	want := map[string]string{
		"no listener ≤ 2 %/BPF_PROG_RUN udp-60B-forward over rate":             "met",
		"monitor, default types ≤ 10 %/BPF_PROG_RUN udp-60B-forward over rate": "met",
		"monitor, all types ≤ 10 %/BPF_PROG_RUN udp-60B-forward over rate":     "missed",
		"no listener ≤ 2 %/BPF_PROG_RUN tcp-established over tcp":              "not resolved",
		"monitor, default types ≤ 10 %/BPF_PROG_RUN tcp-established over tcp":  "not resolved",
		"monitor, all types ≤ 10 %/BPF_PROG_RUN tcp-established over tcp":      "not resolved",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
	for _, row := range pr.Rows {
		if row.Path == "udp-60B-forward" && row.Variant == "all" && (row.DeltaMed != 60 || math.Abs(row.DeltaPart-0.2) > 1e-9) {
			t.Errorf("row %+v: want +60 ns, 20 %% of off's run", row)
		}
	}
	lines := progRunLines(pr, true)
	if !strings.HasPrefix(lines[0], "| path |") || len(lines) < 2+len(pr.Rows) {
		t.Errorf("markdown table: %q", lines)
	}
}
