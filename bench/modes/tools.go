package main

// The tests and how to run them: iperf3 and sockperf servers in the server
// container, clients in the client container, CPU from /proc/stat.

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// server is a server process each topology runs in its server container,
// bound to the server's address on every network.
type server struct {
	tool string
	port int
	cpus string // taskset CPU list; "" = not pinned
}

// Latency runs pin the client to CPU 0 and use the sockperf server pinned
// to the same CPU or to CPU 1. Unpinned, ping-pong latency is bimodal on a
// small VM: ~7 us when both land on one core, ~35 us when every message
// wakes the other core (idle exit + IPI), which swamps datapath costs.
// Throughput runs are not pinned: pinning did not make them steadier.
const latencyClientCPU = "0"

var (
	iperfServer      = server{tool: "iperf3", port: 5201}
	sockperfSameCPU  = server{tool: "sockperf", port: 11111, cpus: "0"}
	sockperfCrossCPU = server{tool: "sockperf", port: 11112, cpus: "1"}
)

func servers() []server {
	s := []server{iperfServer, sockperfSameCPU}
	if runtime.NumCPU() > 1 {
		s = append(s, sockperfCrossCPU)
	}
	return s
}

func (s server) argv(ip netip.Addr) []string {
	var argv []string
	if s.cpus != "" {
		argv = []string{"taskset", "-c", s.cpus}
	}
	port := strconv.Itoa(s.port)
	switch s.tool {
	case "iperf3":
		return append(argv, "iperf3", "-s", "-B", ip.String(), "-p", port)
	default:
		return append(argv, "sockperf", "sr", "--tcp", "-i", ip.String(), "-p", port)
	}
}

// Metric is one number a test reports.
type Metric struct {
	Key          string `json:"key"`
	Label        string `json:"label"`
	HigherBetter bool   `json:"higher_is_better"`
	Digits       int    `json:"-"` // decimals in the table
}

var (
	tcpMetrics = []Metric{
		{Key: "gbps", Label: "Gbit/s", HigherBetter: true, Digits: 2},
		{Key: "cpu_s_per_gbit", Label: "CPU-s/Gbit", Digits: 3},
		{Key: "cpu_busy_pct", Label: "CPU busy %", Digits: 1},
		{Key: "retransmits", Label: "retransmits", Digits: 0},
	}
	latencyMetrics = []Metric{
		{Key: "avg_us", Label: "avg µs", Digits: 2},
		{Key: "p50_us", Label: "p50 µs", Digits: 2},
		{Key: "p99_us", Label: "p99 µs", Digits: 2},
	}
)

// Sample is one run's numbers by metric key.
type Sample map[string]float64

// Test is one measurement, run once per mode per repetition.
type Test struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Kind    string `json:"kind"` // "tcp", "latency" or "rate"
	MTU     int    `json:"mtu"`
	IPv6    bool   `json:"ipv6,omitempty"` // between the containers' IPv6 addresses
	Streams int    `json:"streams,omitempty"`
	Server  server `json:"-"`
	// ClientCPUs pins the client (taskset list); "" = not pinned.
	ClientCPUs string `json:"client_cpus,omitempty"`
	ServerCPUs string `json:"server_cpus,omitempty"`
	// Source is how a rate test's packets leave the client (rate.go).
	Source gen.Source `json:"source,omitempty"`
}

func (t Test) Metrics() []Metric {
	switch t.Kind {
	case "tcp":
		ms := t.withObserve(tcpMetrics)
		if observing {
			ms = slices.Insert(ms, len(ms)-1, observeTCPMetric)
		}
		return ms
	case "rate":
		return t.withObserve(rateMetrics)
	}
	return latencyMetrics
}

// withObserve adds -observe's metrics (observe.go) to ms.
func (t Test) withObserve(ms []Metric) []Metric {
	if !observing {
		return ms
	}
	return append(append([]Metric{}, ms...), observeMetrics...)
}

// tests lists TCP throughput with 1 and 4 streams per MTU over IPv4 and
// over IPv6 (BIG TCP's two switches, gso_max_size and gso_ipv4_max_size,
// are per family), latency at
// the first MTU (sockperf's 14-byte messages do not depend on the MTU)
// with client and server on the same CPU and, given two, on different
// ones, and the 64-byte UDP forwarding rate at the first MTU.
func tests(mtus []int) []Test {
	var ts []Test
	for _, v6 := range []bool{false, true} {
		for _, mtu := range mtus {
			for _, p := range []int{1, 4} {
				t := Test{
					ID: fmt.Sprintf("tcp-%dx-mtu%d", p, mtu), Kind: "tcp", MTU: mtu, IPv6: v6, Streams: p, Server: iperfServer,
					Title: fmt.Sprintf("TCP %d stream%s, MTU %d", p, map[bool]string{true: "s"}[p > 1], mtu),
				}
				if v6 {
					t.ID, t.Title = "tcp6"+strings.TrimPrefix(t.ID, "tcp"), t.Title+", IPv6"
				}
				if observing {
					t.ClientCPUs, t.ServerCPUs = observeClientCPU, observeServerCPU
				}
				ts = append(ts, t)
			}
		}
	}
	for _, s := range servers() {
		if s.tool != "sockperf" {
			continue
		}
		where := map[bool]string{true: "same", false: "cross"}[s.cpus == latencyClientCPU]
		ts = append(ts, Test{
			ID: fmt.Sprintf("latency-%scpu-mtu%d", where, mtus[0]), Kind: "latency", MTU: mtus[0], Server: s,
			ClientCPUs: latencyClientCPU, ServerCPUs: s.cpus,
			Title: fmt.Sprintf("TCP ping-pong, %s CPU, MTU %d", where, mtus[0]),
		})
	}
	for _, src := range []gen.Source{gen.SKBs, gen.Frames} {
		ts = append(ts, Test{
			ID: fmt.Sprintf("rate-udp64-%s-mtu%d", src, mtus[0]), Kind: "rate", MTU: mtus[0], Source: src,
			Title: fmt.Sprintf("UDP 64 B rate, %s source", src),
		})
	}
	return ts
}

// Run measures t between the containers of p.
func (t Test) Run(ctx context.Context, p harness.Pair, d time.Duration) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, d+60*time.Second)
	defer cancel()
	secs := strconv.Itoa(int(d.Round(time.Second) / time.Second))
	port := strconv.Itoa(t.Server.port)
	client := func(argv ...string) []string {
		if t.ClientCPUs != "" {
			argv = append([]string{"taskset", "-c", t.ClientCPUs}, argv...)
		}
		return harness.NSExec(p.Client, argv...)
	}
	if t.Kind == "latency" {
		out, err := harness.Run(ctx, client("sockperf", "pp", "--tcp", "-i", p.ServerIP.String(), "-p", port, "-t", secs)...)
		if err != nil {
			return nil, err
		}
		l, err := measure.ParseSockperf(out)
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, out)
		}
		return Sample{"avg_us": l.AvgUs, "p50_us": l.P50Us, "p99_us": l.P99Us}, nil
	}
	var (
		before, after measure.CPUTimes
		r             measure.IperfResult
		err, cerr     error
		perr          error
	)
	// A server still closing the previous test (the same mode twice in a
	// row, as with one mode) answers "busy": try again shortly.
	for try := 1; ; try++ {
		if before, err = measure.ReadCPU(); err != nil {
			return nil, err
		}
		var out string
		out, err = harness.Run(ctx, client("iperf3", "-c", p.ServerIP.String(), "-p", port,
			"-t", secs, "-P", strconv.Itoa(t.Streams), "-J", "--connect-timeout", "3000")...)
		after, cerr = measure.ReadCPU()
		// iperf3 -J reports failures in its JSON, sometimes with exit status 0.
		r, perr = measure.ParseIperf3([]byte(out))
		busy := (err != nil && strings.Contains(err.Error(), "server is busy")) || (perr != nil && strings.Contains(perr.Error(), "server is busy"))
		if !busy || try == 5 {
			break
		}
		log.Printf("%s: iperf3 server busy (try %d of 5), again in 0.5 s", t.ID, try)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	switch {
	case err != nil && perr != nil:
		return nil, fmt.Errorf("%w (%v)", err, perr)
	case err != nil:
		return nil, err
	case perr != nil:
		return nil, perr
	case cerr != nil:
		return nil, cerr
	}
	gbps := r.ReceivedBps / 1e9
	busy := measure.BusyFraction(before, after)
	return Sample{
		"gbps":         gbps,
		"cpu_busy_pct": busy * 100,
		// The machine's busy CPU-seconds per Gbit moved (measure.CPUPerGbit).
		"cpu_s_per_gbit": measure.CPUPerGbit(before, after, gbps*r.Seconds),
		"retransmits":    float64(r.Retransmits),
	}, nil
}

// startServers starts the servers bound to the server container's address
// on p; t stops them before it tears down.
func startServers(ctx context.Context, t Topology, p harness.Pair, logDir string) error {
	ss := servers()
	if p.ServerIP.Is6() {
		ss = []server{iperfServer} // only TCP runs over IPv6 (sockperf 3.7 binds IPv4 only)
	}
	for _, s := range ss {
		fam := map[bool]string{false: "", true: "-ipv6"}[p.ServerIP.Is6()]
		name := fmt.Sprintf("%s server :%d %s mtu %d%s", s.tool, s.port, t.Name(), p.MTU, fam)
		logPath := filepath.Join(logDir, fmt.Sprintf("%s-%s-%d-%d%s.log", t.Name(), s.tool, s.port, p.MTU, fam))
		pr, err := harness.StartProc(name, logPath, harness.NSExec(p.Server, s.argv(p.ServerIP)...)...)
		if err != nil {
			return err
		}
		t.Defer("stop "+name, pr.Stop)
		addr := netip.AddrPortFrom(p.ServerIP, uint16(s.port))
		if err := harness.WaitFor(ctx, name, 10*time.Second, pr, func() bool { return harness.Listening(ctx, p.Server, addr) }); err != nil {
			return err
		}
	}
	return nil
}

// checkPath pings the server from the client, then sends one full-size
// packet with DF set: the path must carry the configured MTU.
func checkPath(ctx context.Context, p harness.Pair) error {
	ip := p.ServerIP.String()
	if _, err := harness.Run(ctx, harness.NSExec(p.Client, "ping", "-c", "3", "-i", "0.2", "-W", "2", ip)...); err != nil {
		return fmt.Errorf("no connectivity %s -> %s: %w", p.Client, ip, err)
	}
	hdrs := 28 // IPv4 + ICMP
	if p.ServerIP.Is6() {
		hdrs = 48
	}
	if _, err := harness.Run(ctx, harness.NSExec(p.Client, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", strconv.Itoa(p.MTU-hdrs), ip)...); err != nil {
		return fmt.Errorf("MTU %d does not fit the path %s -> %s: %w", p.MTU, p.Client, ip, err)
	}
	return nil
}
