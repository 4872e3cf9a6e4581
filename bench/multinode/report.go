package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// key names one row: streams 0 for TCP_RR.
type key struct {
	scenario    int
	path, setup string
	streams     int
}

// medians are the repetitions' medians by row and metric.
type medians map[key]map[string]float64

func (r *report) medians() medians {
	all := map[key]map[string][]float64{}
	add := func(k key, m string, v float64) {
		if all[k] == nil {
			all[k] = map[string][]float64{}
		}
		all[k][m] = append(all[k][m], v)
	}
	for _, x := range r.Results {
		k := key{x.Scenario, x.Path, x.Setup, x.Streams}
		add(k, "gbps", x.Gbps)
		add(k, "cpu", x.CPUPerGbit)
		add(k, "retr", float64(x.Retr))
	}
	for _, x := range r.RR {
		k := key{x.Scenario, x.Path, x.Setup, 0}
		add(k, "tps", x.PerSec)
		add(k, "p50", x.P50Us)
		add(k, "p99", x.P99Us)
	}
	out := medians{}
	for k, ms := range all {
		out[k] = map[string]float64{}
		for m, v := range ms {
			out[k][m] = measure.Median(v)
		}
	}
	return out
}

// ratio formats a/b ("-" when either is missing).
func ratio(a, b float64) string {
	q := measure.Ratio(a, b)
	if math.IsNaN(q) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", q)
}

// num formats v with digits decimals ("-" when missing).
func num(v float64, digits int) string {
	if math.IsNaN(v) || v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", digits, v)
}

// get is a median, NaN when the row or metric is missing.
func (m medians) get(k key, metric string) float64 {
	if v, ok := m[k][metric]; ok {
		return v
	}
	return math.NaN()
}

// tables writes one scenario's throughput and TCP_RR tables, each row
// with its ratio to base's row of the same path (and streams).
func (m medians) tables(b *strings.Builder, scenario int, paths, setups []string, streams []int, base string) {
	fmt.Fprintf(b, "| path | setup | streams | Gbit/s | x %s | CPU-s/Gbit | x %s | retransmits |\n|---|---|---|---|---|---|---|---|\n", base, base)
	for _, p := range paths {
		for _, s := range setups {
			for _, n := range streams {
				k, bk := key{scenario, p, s, n}, key{scenario, p, base, n}
				if _, ok := m[k]; !ok {
					continue
				}
				fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %.0f |\n", p, s, n,
					num(m.get(k, "gbps"), 2), ratio(m.get(k, "gbps"), m.get(bk, "gbps")),
					num(m.get(k, "cpu"), 3), ratio(m.get(k, "cpu"), m.get(bk, "cpu")), m.get(k, "retr"))
			}
		}
	}
	fmt.Fprintf(b, "\nTCP_RR (sockperf ping-pong, %d-byte messages, round trips):\n\n", rrSize)
	fmt.Fprintf(b, "| path | setup | trans/s | x %s | RTT p50 µs | x %s | RTT p99 µs | x %s |\n|---|---|---|---|---|---|---|---|\n", base, base, base)
	for _, p := range paths {
		for _, s := range setups {
			k, bk := key{scenario, p, s, 0}, key{scenario, p, base, 0}
			if _, ok := m[k]; !ok {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p, s,
				num(m.get(k, "tps"), 0), ratio(m.get(k, "tps"), m.get(bk, "tps")),
				num(m.get(k, "p50"), 1), ratio(m.get(k, "p50"), m.get(bk, "p50")),
				num(m.get(k, "p99"), 1), ratio(m.get(k, "p99"), m.get(bk, "p99")))
		}
	}
}

// target is one of issue 16's (or 28's) targets: the ratio of setup's
// metric to base's on path, at least (or at most) want.
type target struct {
	scenario          int
	path, setup, base string
	metric, label     string
	atMost            bool
	want              float64
	// streams: the rows it applies to (nil: every throughput row; TCP_RR's
	// metrics are row 0, the only one).
	streams []int
}

func (m medians) targets(b *strings.Builder, ts []target, streams []int) {
	fmt.Fprintf(b, "| target | streams | measured | |\n|---|---|---|---|\n")
	for _, t := range ts {
		ns := streams
		if t.streams != nil {
			ns = t.streams
		} else if t.metric == "tps" {
			ns = []int{0}
		}
		for _, n := range ns {
			q := measure.Ratio(m.get(key{t.scenario, t.path, t.setup, n}, t.metric), m.get(key{t.scenario, t.path, t.base, n}, t.metric))
			if math.IsNaN(q) {
				continue
			}
			op, met := ">=", q >= t.want
			if t.atMost {
				op, met = "<=", q <= t.want
			}
			verdict := "met"
			if !met {
				verdict = "**missed**"
			}
			fmt.Fprintf(b, "| s%d %s %s: %s %s %.1fx %s | %d | %.2fx | %s |\n", t.scenario, t.path, t.setup, t.label, op, t.want, t.base, n, q, verdict)
		}
	}
}

func (r *report) markdown(o options) string {
	var b strings.Builder
	m := r.medians()
	fmt.Fprintf(&b, "%s, %s, %d CPUs; %d reps of %s; loadavg %s at the start, %s at the end; medians, ratios to Linux in the same run.\n\n",
		r.Kernel, r.CPU, r.NProc, o.Reps, o.Duration, r.LoadStart, r.LoadEnd)
	b.WriteString("CPU-s/Gbit: the whole machine's busy CPU time over each iperf3 run (/proc/stat, all CPUs: " +
		"softirq, where forwarding, encapsulation and the BPF programs run, is charged to no process or namespace) " +
		"per Gbit received; other load on the machine counts too, so it is an upper bound, and ratios are of runs interleaved in this run. " +
		"TCP_RR: sockperf ping-pong, one message in flight, client and server on CPU " + rrCPU + ": transactions a second = round trips a second. " +
		"Ratios of CPU-s/Gbit and of latency: lower is better.\n\n")
	var ts []target
	if has(o.scenarios, 2) {
		fmt.Fprintf(&b, "# Scenario 2: pod to pod across two nodes over VXLAN\n\nRatios to linux-vxlan.\n\n")
		m.tables(&b, 2, []string{"pod-pod"}, o.setups, o.streams, "linux-vxlan")
		for _, s := range o.setups {
			if strings.HasPrefix(s, "xlane") && s != "xlane-tc-wg" {
				ts = append(ts,
					target{2, "pod-pod", s, "linux-vxlan", "gbps", "Gbit/s", false, 1.5, nil},
					target{2, "pod-pod", s, "linux-vxlan", "cpu", "CPU-s/Gbit", true, 0.6, nil})
			}
		}
	}
	if has(o.scenarios, 1) {
		fmt.Fprintf(&b, "\n# Scenario 1: one node's paths, xlane against Linux\n\n"+
			"Ratios to linux. nat-vxlan: a service VIP on node 1, its backend on node 2 (the scenario-2 clusters; "+
			"scenario 2's service case too). vlan-vxlan: a host on VLAN %d of node 1's uplink to a pod on node 2.\n\n", vlanID)
		m.tables(&b, 1, append(append([]string(nil), paths1...), "nat-vxlan", "vlan-vxlan"), []string{"xlane-tc", "linux"}, o.streams, "linux")
		ts = append(ts, target{1, "nat-vxlan", "xlane-tc", "linux", "gbps", "Gbit/s", false, 2, nil})
	}
	if len(ts) > 0 {
		b.WriteString("\n# Issue 16's targets\n\n")
		m.targets(&b, ts, o.streams)
	}
	if has(o.scenarios, 2) && has2(o.setups, "xlane-tc-wg", "linux-wg") {
		b.WriteString("\n# Issue 28's targets (encryption between nodes)\n\n")
		m.targets(&b, wgTargets(has2(o.setups, "xlane-tc-wg", "xlane-tc")), o.streams)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}
