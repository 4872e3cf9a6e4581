package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xlane-dev/xlane/internal/api"
)

// The metrics endpoint (docs/observability.md) with crafted traffic:
//
//	 node netns: xlaned --metrics-addr 127.0.0.1:9643, prometheus on 127.0.0.1:9090
//	+----------------------------------------------+
//	| xlhA -------- c0 (sender, raw frames)         |
//	| xlhB -------- c1 (UDP listener on 9998)       |
//	+----------------------------------------------+
//
// c0 sends N frames to c1's port 9999, which a firewall rule drops, and M
// to port 9998, which is allowed: the metrics must say exactly N drops of
// drop_fw (and N times the frame's bytes) for c0, M packets forwarded,
// the rule's hits N; a real Prometheus scraping every second must return
// the drop count for a PromQL query; and when c0 is removed every series
// naming it must vanish, from the endpoint and from Prometheus' answers.
func TestMetrics(t *testing.T) {
	for _, mode := range []string{"tc", "xdp"} {
		t.Run(mode, func(t *testing.T) { testMetrics(t, mode) })
	}
}

const metricsAddr = "127.0.0.1:9643"

// withMetrics brings the node's loopback up and serves metrics on it.
func withMetrics(n *node) {
	run(n.t, "ip", "-n", n.netns, "link", "set", "lo", "up")
	n.flags = append(n.flags, "--metrics-addr", metricsAddr)
}

// nsHTTP is an HTTP client whose connections are made in netns (the
// node's loopback is the node's own).
func nsHTTP(netns string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

// scrape reads the node's metrics endpoint.
func scrape(t *testing.T, n *node) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := nsHTTP(n.netns).Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return mfs
}

// sample is the value of the series of family name whose labels include
// want (0 when none).
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	total := 0.0
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

func testMetrics(t *testing.T, mode string) {
	opts := []nodeOpt{withMetrics}
	if mode == "tc" {
		// Per-program run statistics: on machine-wide while this daemon runs.
		opts = append(opts, func(n *node) { n.flags = append(n.flags, "--bpf-stats") })
	}
	n := newNode(t, opts...)
	requireMode(t, n, mode)
	subnet := map[string]string{"tc": "10.71.0.0/24", "xdp": "10.72.0.0/24"}[mode]
	n.mustXlane(nil, "network", "create", "blue", "--subnet", subnet, "--mode", mode)
	e := &robustEnv{n: n}
	for range 2 {
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "blue", "--netns", c)
		runIn(t, c, "sysctl", "-qw", "net.ipv6.conf."+ep.IfName+".disable_ipv6=1")
		e.cs, e.eps = append(e.cs, c), append(e.eps, ep)
	}
	src := e.eps[0].ID
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte(fmt.Sprintf(`rules:
  - {name: deny-9999, scope: endpoint:%s, direction: from-endpoint, proto: udp, dport: 9999, action: drop}
`, src)), 0o600)
	n.mustXlane(nil, "fw", "apply", rules)

	var prom *prometheus
	if mode == "tc" { // one real Prometheus is enough: the endpoint is the same in every mode
		prom = startPrometheus(t, n)
	}

	// c1 listens on 9998 (no ICMP error answers the allowed datagrams).
	var pc net.PacketConn
	err := ns.WithNetNSPath(nsPath(e.cs[1]), func(ns.NetNS) (err error) {
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(e.ip(1), 9998).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()

	const dropped, allowed = 25, 40
	payload := []byte("xlane metrics " + mode)
	deny := udpFrame(t, e.mac(t, 0, false), e.mac(t, 0, true), e.ip(0), e.ip(1), 9999, payload)
	allow := udpFrame(t, e.mac(t, 0, false), e.mac(t, 0, true), e.ip(0), e.ip(1), 9998, payload)
	from := map[string]string{"endpoint": src, "network": "blue", "direction": "from_endpoint", "device": "endpoint",
		"hook": mode} // the program that decided: tcx or XDP
	before := scrape(t, n)
	frames := make([][]byte, 0, dropped+allowed)
	for range dropped {
		frames = append(frames, deny)
	}
	for range allowed {
		frames = append(frames, allow)
	}
	sendRaw(t, e.cs[0], e.eps[0].IfName, frames...)
	got := 0
	pc.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	for got < allowed {
		if _, _, err := pc.ReadFrom(buf); err != nil {
			break
		}
		got++
	}
	if got != allowed {
		t.Fatalf("c1 received %d of %d allowed datagrams", got, allowed)
	}
	time.Sleep(200 * time.Millisecond)
	after := scrape(t, n)
	delta := func(name string, labels map[string]string) float64 {
		return sample(after, name, labels) - sample(before, name, labels)
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	drop := with(from, "reason", "drop_fw")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   int
	}{
		{"xlane_drop_total", drop, dropped},
		{"xlane_drop_bytes_total", drop, dropped * len(deny)},
		{"xlane_flows_processed_total", with(drop, "verdict", "dropped"), dropped},
		{"xlane_flows_processed_bytes_total", with(drop, "verdict", "dropped"), dropped * len(deny)},
		// Every frame c0 sent, counted once, under one reason or another.
		{"xlane_endpoint_packets_total", map[string]string{"endpoint": src, "direction": "from_endpoint"}, dropped + allowed},
		{"xlane_endpoint_bytes_total", map[string]string{"endpoint": src, "direction": "from_endpoint"}, dropped*len(deny) + allowed*len(allow)},
		{"xlane_flows_processed_total", with(from, "verdict", "dropped"), dropped},
		{"xlane_firewall_rule_hits_total", map[string]string{"rule": "deny-9999", "action": "drop"}, dropped},
		{"xlane_firewall_rule_bytes_total", map[string]string{"rule": "deny-9999"}, dropped * len(deny)},
	} {
		if d := delta(c.name, c.labels); d != float64(c.want) {
			t.Errorf("%s%v: +%v, want +%d", c.name, c.labels, d, c.want)
		}
	}
	if mode == "tc" {
		prog := map[string]string{"program": "xlane_from_endpoint"}
		if d := delta("xlane_bpf_program_runs_total", prog); d < dropped+allowed {
			t.Errorf("xlane_bpf_program_runs_total{xlane_from_endpoint}: +%v with --bpf-stats, want at least +%d", d, dropped+allowed)
		}
		if v := sample(after, "xlane_bpf_program_run_seconds_total", prog); v <= 0 {
			t.Errorf("xlane_bpf_program_run_seconds_total{xlane_from_endpoint} = %v with --bpf-stats", v)
		}
		if v := sample(after, "xlane_bpf_stats_enabled", nil); v != 1 {
			t.Errorf("xlane_bpf_stats_enabled = %v with --bpf-stats", v)
		}
		fwd := with(from, "reason", "fwd_peer", "verdict", "forwarded")
		if d := delta("xlane_flows_processed_total", fwd); d != allowed {
			t.Errorf("fwd_peer from c0: +%v, want +%d", d, allowed)
		}
		if d := delta("xlane_flows_processed_bytes_total", fwd); d != float64(allowed*len(allow)) {
			t.Errorf("fwd_peer bytes from c0: +%v, want +%d", d, allowed*len(allow))
		}
	}
	// The same numbers as the CLI's counters (which read between two
	// scrapes: a neighbour or router packet may arrive meanwhile).
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "inspect", src)
	later := scrape(t, n)
	for _, r := range ep.Reasons {
		l := map[string]string{"endpoint": src, "reason": r.Reason, "direction": r.Direction}
		if v, w := sample(after, "xlane_flows_processed_total", l), sample(later, "xlane_flows_processed_total", l); v > float64(r.Packets) || w < float64(r.Packets) {
			t.Errorf("%s %s: metrics %v then %v packets, endpoint inspect %d between", r.Direction, r.Reason, v, w, r.Packets)
		}
	}
	for _, name := range []string{"xlane_ct_max_entries", "xlane_bpf_map_max_entries", "go_goroutines"} {
		if _, ok := after[name]; !ok {
			t.Errorf("no %s in the scrape", name)
		}
	}
	if v := sample(after, "xlane_bpf_map_entries", map[string]string{"map": "xlane_endpoints"}); v != 2 {
		t.Errorf("xlane_bpf_map_entries{map=xlane_endpoints} = %v, want 2", v)
	}
	if v := sample(after, "xlane_api_request_duration_seconds", nil); v != 0 {
		t.Errorf("histogram read as a counter: %v", v)
	}
	if h := after["xlane_api_request_duration_seconds"]; h == nil || !hasRoute(h, "POST /v1/endpoints") {
		t.Errorf("no API latency of POST /v1/endpoints: %v", h)
	}

	if mode == "tc" {
		// A service whose backend is c1's listener: one flow through it
		// shows as the backend's tracked flow.
		backend := netip.AddrPortFrom(e.ip(1), 9998).String()
		n.mustXlane(nil, "service", "create", "echo", "--vip", "10.96.9.9:9998/udp", "--backend", backend)
		err := ns.WithNetNSPath(nsPath(e.cs[0]), func(ns.NetNS) error {
			u, err := net.Dial("udp", "10.96.9.9:9998")
			if err != nil {
				return err
			}
			defer u.Close()
			_, err = u.Write([]byte("via the VIP"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, _, err := pc.ReadFrom(buf); err != nil {
			t.Fatalf("datagram to the VIP not received by its backend: %v", err)
		}
		m := scrape(t, n)
		if v := sample(m, "xlane_service_backend_flows", map[string]string{"service": "echo", "backend": backend}); v != 1 {
			t.Errorf("xlane_service_backend_flows{echo,%s} = %v, want 1", backend, v)
		}
		if v := sample(m, "xlane_service_backends", map[string]string{"service": "echo", "state": "active"}); v != 1 {
			t.Errorf("xlane_service_backends{echo,active} = %v, want 1", v)
		}
	}

	if prom != nil {
		q := fmt.Sprintf(`sum(xlane_drop_total{reason="drop_fw",endpoint=%q})`, src)
		prom.waitValue(t, q, dropped)
	}

	// Removing c0 ends every series that names it.
	n.mustXlane(nil, "endpoint", "rm", src)
	gone := scrape(t, n)
	for name, mf := range gone {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "endpoint" && lp.GetValue() == src {
					t.Errorf("removed endpoint %s still in %s", src, name)
				}
			}
		}
	}
	if prom != nil {
		prom.waitEmpty(t, fmt.Sprintf(`{endpoint=%q}`, src))
	}
}

func hasRoute(mf *dto.MetricFamily, route string) bool {
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "route" && lp.GetValue() == route && m.GetHistogram().GetSampleCount() > 0 {
				return true
			}
		}
	}
	return false
}

// prometheus is Debian's prometheus server in a node's namespace,
// scraping that node's xlaned every second.
type prometheus struct {
	client *http.Client
	addr   string
}

func startPrometheus(t *testing.T, n *node) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not installed (scripts/deps.sh installs Debian's): %v", err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: xlane
    static_configs:
      - targets: [%q]
`, metricsAddr)), 0o600)
	const addr = "127.0.0.1:9090"
	var log strings.Builder
	cmd := inNS(n.netns, bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL) // by pid: ours
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	p := &prometheus{client: nsHTTP(n.netns), addr: addr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := p.client.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query runs an instant PromQL query and returns the result's values.
func (p *prometheus) query(t *testing.T, q string) []float64 {
	t.Helper()
	resp, err := p.client.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v %s: %s", q, err, r.Error, body)
	}
	var out []float64
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			t.Fatalf("query %s: value %v: %v", q, s.Value, err)
		}
		out = append(out, v)
	}
	return out
}

// waitValue waits (a few scrapes) for q to return exactly want.
func (p *prometheus) waitValue(t *testing.T, q string, want float64) {
	t.Helper()
	var got []float64
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if got = p.query(t, q); len(got) == 1 && got[0] == want {
			return
		}
	}
	t.Errorf("PromQL %s = %v, want %v", q, got, want)
}

// waitEmpty waits for q to return no series (stale once a scrape no
// longer has them).
func (p *prometheus) waitEmpty(t *testing.T, q string) {
	t.Helper()
	var got []float64
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if got = p.query(t, q); len(got) == 0 {
			return
		}
	}
	t.Errorf("PromQL %s still returns %d series after the endpoint was removed", q, len(got))
}

// A metrics address beyond loopback is refused at start, naming the flag
// that allows it, before xlaned touches anything (no state file, no pins).
func TestMetricsAddrRefused(t *testing.T) {
	dir := t.TempDir()
	pinDir := "/sys/fs/bpf/xle-" + suffix()
	defer os.RemoveAll(pinDir)
	netns := newNetns(t, "node") // were it to start, in a namespace of its own
	for _, addr := range []string{"0.0.0.0:9643", ":9643", "unix:relative.sock"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, "nsenter", "--net="+nsPath(netns), "--", filepath.Join(binDir, "xlaned"),
			"--state", filepath.Join(dir, "state.db"), "--socket", filepath.Join(dir, "xlane.sock"), "--pin-dir", pinDir,
			"--docker-plugin-socket=", "--metrics-addr", addr).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "--metrics-addr") {
			t.Errorf("--metrics-addr %s: %v\n%s", addr, err, out)
		}
		if !strings.HasPrefix(addr, "unix:") && !strings.Contains(string(out), "--metrics-allow-remote") {
			t.Errorf("--metrics-addr %s: the error does not name --metrics-allow-remote:\n%s", addr, out)
		}
	}
	for _, p := range []string{filepath.Join(dir, "state.db"), pinDir} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists after a refused start", p)
		}
	}
}
