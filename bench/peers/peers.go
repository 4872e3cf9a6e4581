// Package peers is the report of bench/peers (issue 31, `make bench
// BENCH=peers`): xlane against Cilium on the same real two-node
// Kubernetes cluster, the same pods and workloads, in the same run.
//
// The clusters, pods and load are test/e2e's (TestPeers in
// test/e2e/peers_test.go, on the cluster set-up of TestKubernetesCluster
// and TestCiliumCluster: kubelets, containerd, the real kube-apiserver):
// the cluster code is the e2e package's, so the benchmark is a test there
// that make runs with the options below, and this package holds what the
// benchmark computes and writes: samples, medians, ratios, the markdown
// table and the JSON record (bench/results/peers-*.json, peers-latest.md).
//
//	make bench BENCH=peers                                   # 3 reps x 10 s per row
//	XLANE_PEERS_REPS=1 XLANE_PEERS_SECONDS=2 make bench BENCH=peers   # smoke
//	XLANE_PEERS_SCALE=0 ...        # without the 10,000-Service rows
//	XLANE_PEERS_CALIBRATE=0 ...    # xlane's nodes not calibrated (BIG TCP off)
//	XLANE_PEERS_ROWS='same node, TCP|1,000-rule' ...   # only the rows matched (a regexp)
//	XLANE_PEERS_PERF=/tmp/prof ... # a perf profile of each row (bench/perfbuckets buckets it)
//	XLANE_PEERS_POLICY_RULES=10 ...   # the policy row with another number of rules
//	XLANE_PEERS_UPLINK_GSO=0 ...   # the uplinks at the veth's 64 KiB GSO (default 196608: set up for BIG TCP)
//	XLANE_PEERS_SETUPS=xlane-vxlan,xlane-vxlan+--uplink-xdp-mode=generic,cilium-vxlan
//	    # a variant (+--xlaned-flag=v, +gso=BYTES, +bigtcp=on|off) is a column of its own
//
// A setup is one network on its own cluster (setup names: xlane-native,
// xlane-vxlan, cilium-native, cilium-vxlan); all clusters run at once and
// each repetition measures every row on every setup in turn, the order
// rotated per repetition, so slow drift of the machine hits all alike.
// Ratios pair xlane and Cilium of the same routing (native with native,
// vxlan with vxlan): xlane ÷ Cilium of the medians.
package peers

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// Row is a measured quantity.
type Row struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Higher: more is better (throughput, rates); else less is
	// (latency, CPU, memory, time). Target: xlane ÷ Cilium ≥ 1.0 on the
	// first kind, ≤ 1.0 on the second.
	Higher bool `json:"higher"`
}

// Rows are what TestPeers measures, in the table's order.
var Rows = []Row{
	{"pod-pod same node, TCP 1 stream", "Gbit/s", true},
	{"pod-pod same node, TCP 1 stream, CPU", "CPU-s/Gbit", false},
	{"pod-pod same node, TCP 8 streams", "Gbit/s", true},
	{"pod-pod same node, TCP_RR", "trans/s", true},
	{"pod-pod same node, TCP_RR p50", "µs", false},
	{"pod-pod across nodes, TCP 1 stream", "Gbit/s", true},
	{"pod-pod across nodes, TCP 1 stream, CPU", "CPU-s/Gbit", false},
	{"pod-pod across nodes, TCP 8 streams", "Gbit/s", true},
	{"pod-pod across nodes, TCP 8 streams, CPU", "CPU-s/Gbit", false},
	{"pod-pod across nodes, TCP_RR", "trans/s", true},
	{"pod-pod across nodes, TCP_RR p50", "µs", false},
	{"pod-pod across nodes, 64-byte UDP", "packets/s", true},
	{"CPS to a ClusterIP, 1 Service", "conn/s", true},
	{"CPS to a NodePort from outside", "conn/s", true},
	{"CPS to a NodePort from outside, failed", "%", false},
	{"CPS to a ClusterIP, 1,000-rule NetworkPolicy", "conn/s", true},
	{"CPS to a ClusterIP, 10,000 Services", "conn/s", true},
	{"10,000 Services: last API write to answering", "s", false},
	{"EndpointSlice change p50", "ms", false},
	{"EndpointSlice change p99", "ms", false},
	{"agent RSS, 1 Service", "MiB", false},
	{"agent RSS, 10,000 Services", "MiB", false},
	{"agent BPF map memory, 1 Service", "MiB", false},
	{"agent BPF map memory, 10,000 Services", "MiB", false},
	{"agent start to ready", "s", false},
}

// Setup is one network under test and how it was configured.
type Setup struct {
	Name    string   `json:"name"`    // xlane-native, cilium-vxlan, ...
	Peer    string   `json:"peer"`    // xlane or cilium
	Routing string   `json:"routing"` // native or vxlan
	Config  []string `json:"config"`  // the agent's flags, the CNI configuration
}

// Sample is one measurement.
type Sample struct {
	Setup string  `json:"setup"`
	Row   string  `json:"row"`
	Rep   int     `json:"rep"`
	Value float64 `json:"value"`
}

// Report is one run of the benchmark.
type Report struct {
	Started, Finished time.Time
	Kernel            string
	NProc             int
	LoadStart         string
	LoadEnd           string
	Reps              int
	Seconds           float64 // per throughput/rate row and repetition
	Setups            []Setup
	Samples           []Sample
	// Notes: what could not run and why, failures of a repetition.
	Notes []string
}

// Add records a sample.
func (r *Report) Add(setup, row string, rep int, v float64) {
	r.Samples = append(r.Samples, Sample{Setup: setup, Row: row, Rep: rep, Value: v})
}

// Median is the median of setup's samples of row (NaN: none).
func (r *Report) Median(setup, row string) float64 {
	var xs []float64
	for _, s := range r.Samples {
		if s.Setup == setup && s.Row == row && !math.IsNaN(s.Value) {
			xs = append(xs, s.Value)
		}
	}
	return measure.Median(xs)
}

// Markdown is the table: a row per quantity, the median of each setup,
// and xlane ÷ Cilium per routing, marked where it misses the target.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# bench/peers: xlane and Cilium on one cluster, one run\n\n")
	fmt.Fprintf(&b, "%s, kernel %s, %d CPUs, load %s → %s; medians of %d repetition(s), %g s per throughput/rate row.\n\n",
		r.Started.UTC().Format(time.RFC3339), r.Kernel, r.NProc, r.LoadStart, r.LoadEnd, r.Reps, r.Seconds)
	var names []string
	for _, s := range r.Setups {
		names = append(names, s.Name)
	}
	routings := r.routings()
	fmt.Fprintf(&b, "| row | unit | %s |", strings.Join(names, " | "))
	for _, rt := range routings {
		fmt.Fprintf(&b, " xlane ÷ Cilium (%s) |", rt)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(names)+len(routings)) + "\n")
	for _, row := range Rows {
		fmt.Fprintf(&b, "| %s | %s |", row.Name, row.Unit)
		for _, n := range names {
			fmt.Fprintf(&b, " %s |", format(r.Median(n, row.Name)))
		}
		for _, rt := range routings {
			x := measure.Ratio(r.Median("xlane-"+rt, row.Name), r.Median("cilium-"+rt, row.Name))
			mark := ""
			if !math.IsNaN(x) && ((row.Higher && x < 1) || (!row.Higher && x > 1)) {
				mark = " ✗"
			}
			fmt.Fprintf(&b, " %s%s |", format(x), mark)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n✗: xlane misses the target (≥ 1.0 where more is better, ≤ 1.0 where less is).\n")
	for _, s := range r.Setups {
		fmt.Fprintf(&b, "\n%s (%s, %s routing):\n\n", s.Name, s.Peer, s.Routing)
		for _, c := range s.Config {
			fmt.Fprintf(&b, "    %s\n", c)
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// routings are the routings both an xlane and a Cilium setup ran.
func (r *Report) routings() []string {
	seen := map[string]map[string]bool{}
	for _, s := range r.Setups {
		if seen[s.Routing] == nil {
			seen[s.Routing] = map[string]bool{}
		}
		seen[s.Routing][s.Peer] = true
	}
	var out []string
	for rt, p := range seen {
		if p["xlane"] && p["cilium"] {
			out = append(out, rt)
		}
	}
	sort.Strings(out)
	return out
}

func format(x float64) string {
	switch {
	case math.IsNaN(x):
		return "—"
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// Write writes the report into dir: peers-<started>.json and
// peers-latest.md; it returns the markdown.
func (r *Report) Write(dir string) (string, error) {
	md := r.Markdown()
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return md, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return md, err
	}
	stamp := r.Started.UTC().Format("2006-01-02T150405Z")
	if err := os.WriteFile(filepath.Join(dir, "peers-"+stamp+".json"), js, 0o644); err != nil {
		return md, err
	}
	return md, os.WriteFile(filepath.Join(dir, "peers-latest.md"), []byte(md), 0o644)
}

// Iperf3 is the received throughput (Gbit/s) of `iperf3 -J` output.
func Iperf3(out []byte) (float64, error) {
	r, err := measure.ParseIperf3(out)
	return r.ReceivedBps / 1e9, err
}

// SockperfRR is the transactions a second and the median round trip
// (µs) of `sockperf ping-pong` output.
func SockperfRR(out string) (perSec, p50 float64, err error) {
	l, err := measure.ParseSockperf(out)
	p50 = l.P50Us
	if !l.RTT {
		// sockperf reports half round trips unless --full-rtt.
		p50 *= 2
	}
	return l.PerSec, p50, err
}

// CPU is the machine's CPU times (/proc/stat).
type CPU = measure.CPUTimes

// ReadCPU reads /proc/stat.
func ReadCPU() (CPU, error) { return measure.ReadCPU() }

// CPUPerGbit is measure.CPUPerGbit: busy CPU-seconds between a and b
// per Gbit moved (gbitps × seconds).
func CPUPerGbit(a, b CPU, gbitps, seconds float64) float64 {
	return measure.CPUPerGbit(a, b, gbitps*seconds)
}

// Percentile is measure.Percentile: nearest rank, NaN when xs is empty.
func Percentile(xs []float64, p float64) float64 { return measure.Percentile(xs, p) }

// IperfUDP is what `iperf3 -J -u` output says was sent and received
// (packets a second): the receiver's packets less those it counted lost,
// over its seconds.
func IperfUDP(out []byte) (sent, received float64, err error) {
	type sum struct {
		Seconds     float64 `json:"seconds"`
		Packets     int64   `json:"packets"`
		LostPackets int64   `json:"lost_packets"`
	}
	var doc struct {
		Error string `json:"error"`
		End   struct {
			SumSent     sum `json:"sum_sent"`
			SumReceived sum `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, 0, fmt.Errorf("iperf3 JSON: %w", err)
	}
	if doc.Error != "" {
		return 0, 0, fmt.Errorf("iperf3: %s", doc.Error)
	}
	s, r := doc.End.SumSent, doc.End.SumReceived
	if s.Seconds <= 0 || r.Seconds <= 0 {
		return 0, 0, fmt.Errorf("iperf3: report has no UDP sums (end.sum_sent, end.sum_received)")
	}
	return float64(s.Packets) / s.Seconds, float64(r.Packets-r.LostPackets) / r.Seconds, nil
}
