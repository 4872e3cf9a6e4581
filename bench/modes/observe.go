package main

// The cost of observability on the tc path (`make bench BENCH=observe`,
// issue 19): observability off (tc+off: xlaned --monitor=false, the
// monitor's hooks built out of the same objects) against tc as is (no
// metrics endpoint, no monitor client: the hooks in, one branch each on a
// zero word), the same with a Prometheus scrape every second
// (tc+metrics), with `xlane monitor` attached with its default types
// (tc+monitor: drops, firewall verdicts, flows, NAT, backends) and with
// every type (tc+monitor-all: a verdict event per packet, up to the
// daemon's --monitor-rate), with xlaned --hubble and the stock hubble CLI
// following every flow (tc+hubble, issue 30: the flow ring fed by the
// monitor, names resolved for each flow sent), and, given -baseline REF, tc built from REF
// (tc@base: a before/after of a change). After the end-to-end tests the
// same variants' per-packet cost is measured with BPF_PROG_RUN
// (progrun.go) and expressed against the path's CPU per packet of the
// same run. Same topology and tests as the modes benchmark, with what makes
// a few-percent difference resolvable on a 2-core machine (observeSetup):
// tc+aa, a second plain tc, is the A/A control whose ratio to tc is the
// run's noise floor; iperf3's client and server are pinned to CPUs 0 and
// 1; the mode order rotates from one repetition to the next; ratios are
// the median of the per-repetition ratios, with their spread; and beside
// throughput each measurement records the xlane programs' own run time
// per run (bpf_stats, held on for the whole run) and the CPU time of
// xlaned and the observer client.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// observeModes are the tc variants of the observability benchmark. A
// variant@base is the variant with xlaned built from -baseline's ref: with
// the variant beside it, a before/after of a change in one run.
var observeModes = []string{"tc+aa", "tc+off", "tc+metrics", "tc+monitor", "tc+monitor-all", "tc+hubble", "tc@base",
	"tc+metrics@base", "tc+monitor@base", "tc+monitor-all@base"}

// observeDefault is -observe's mode list (tc@base joins with -baseline).
const observeDefault = "tc,tc+aa,tc+off,tc+metrics,tc+monitor,tc+monitor-all,tc+hubble"

// observing is set by -observe: the measurement changes below apply.
var observing bool

// iperf3's CPUs under -observe: the client (whose CPU also runs the
// datapath: a veth transmit processes the peer's receive, and so xlane's
// programs, on the sending CPU) and the server.
const observeClientCPU, observeServerCPU = "0", "1"

// observeMetrics are what -observe adds to the TCP and rate tests.
var observeMetrics = []Metric{
	{Key: "bpf_ns_run", Label: "BPF ns/run", Digits: 1},
	{Key: "ctl_cpu_ms_s", Label: "xlaned+client CPU ms/s", Digits: 1},
}

// observeTCPMetric is the programs' run time per byte, TCP tests only (a
// run there is a GSO skb or an ACK, not a packet).
var observeTCPMetric = Metric{Key: "bpf_ms_gbit", Label: "BPF ms/Gbit", Digits: 2}

// observeSetup applies -observe's measurement changes: iperf3 pinned,
// latency tests left out (not part of issue 19's benchmark; -only latency
// brings them back), the extra metrics; BPF run statistics are turned on
// by benchmark (enableRunStats) for the whole run.
func observeSetup() {
	observing = true
	reportName = "observe"
	iperfServer.cpus = observeServerCPU
}

// observeFlags sets -observe's defaults for the flags not given: more,
// shorter repetitions (-reps 5, -duration 2s, -rate-duration 1s): the
// ratios are taken per repetition, and a median of 5 resolves more than 3
// longer runs. About 10 minutes on a quiet 2-core machine for the six
// default modes before tc+hubble joined (a seventh), and 2 more for
// BPF_PROG_RUN (-progrun-rounds 41). -quick keeps its own.
func observeFlags(o *options) error {
	if o.Quick {
		return nil
	}
	for _, f := range [][2]string{{"reps", "5"}, {"duration", "2s"}, {"rate-duration", "1s"}} {
		if !flagSet(f[0]) {
			if err := flag.Set(f[0], f[1]); err != nil {
				return fmt.Errorf("-observe default -%s %s: %w", f[0], f[1], err)
			}
		}
	}
	return nil
}

// enableRunStats turns the kernel's BPF run statistics on until the
// returned closer is closed: every BPF program on the machine then pays
// two clock reads per run, in every mode alike.
func enableRunStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF run statistics (BPF_ENABLE_STATS): %w", err)
	}
	return c, nil
}

// runStats is the run count and run time of a topology's programs and the
// CPU time of its xlaned and observer client, at one instant.
type runStats struct {
	runs, ns uint64
	ctlCPU   time.Duration
	at       time.Time
}

// runStats reads x's counters: the programs are those of the links pinned
// under its pin dir (each program once).
func (x *xlaneTopo) runStats() (runStats, error) {
	st := runStats{at: time.Now()}
	seen := map[ebpf.ProgramID]bool{}
	err := filepath.WalkDir(x.pinDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			return nil // a pinned map or program, not a link
		}
		defer l.Close()
		info, err := l.Info()
		if err != nil {
			return fmt.Errorf("link %s: info: %w", path, err)
		}
		if seen[info.Program] {
			return nil
		}
		seen[info.Program] = true
		p, err := ebpf.NewProgramFromID(info.Program)
		if err != nil {
			return fmt.Errorf("link %s: program %d: %w", path, info.Program, err)
		}
		defer p.Close()
		ps, err := p.Stats()
		if err != nil {
			return fmt.Errorf("link %s: program %d stats: %w", path, info.Program, err)
		}
		st.runs += ps.RunCount
		st.ns += uint64(ps.Runtime)
		return nil
	})
	if err != nil {
		return st, err
	}
	if len(seen) == 0 {
		return st, fmt.Errorf("%s: no pinned program links under %s", x.name, x.pinDir)
	}
	for _, p := range []*harness.Proc{x.daemon, x.observer} {
		if p == nil {
			continue
		}
		cpu, err := procCPU(p.Pid())
		if err != nil {
			return st, fmt.Errorf("%s: %w", p.Name, err)
		}
		st.ctlCPU += cpu
	}
	return st, nil
}

// addRunStats adds the counters' change from a to b to s; with a TCP
// sample (gbps over d), also the programs' run time per Gbit carried.
func addRunStats(s Sample, a, b runStats, d time.Duration) error {
	if b.runs <= a.runs {
		return fmt.Errorf("bpf_stats: no program runs during the measurement (run counts %d -> %d): are BPF run statistics on?", a.runs, b.runs)
	}
	s["bpf_ns_run"] = float64(b.ns-a.ns) / float64(b.runs-a.runs)
	s["ctl_cpu_ms_s"] = float64(b.ctlCPU-a.ctlCPU) / float64(time.Millisecond) / b.at.Sub(a.at).Seconds()
	if g := s["gbps"]; g > 0 && d > 0 {
		s["bpf_ms_gbit"] = float64(b.ns-a.ns) / 1e6 / (g * d.Seconds())
	}
	return nil
}

// procCPU is the user + system CPU time of process pid (its threads
// included), from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name in parentheses: state is field 3,
	// utime 14 and stime 15 (in clock ticks, 100 per second on Linux).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want >= 13", pid, len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: utime/stime %q: %w", pid, s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// reportName prefixes the result files: modes, or observe with -observe.
var reportName = "modes"

// splitVariant splits "tc+monitor" into the network mode and the variant
// ("tc+monitor@base": "monitor@base").
func splitVariant(mode string) (netMode, variant string) {
	if m, v, ok := strings.Cut(mode, "+"); ok {
		return m, v
	}
	if m, v, ok := strings.Cut(mode, "@"); ok {
		return m, "@" + v
	}
	return mode, ""
}

// safeName is mode usable in namespace and pin names.
func safeName(mode string) string { return strings.NewReplacer("+", "-", "@", "-").Replace(mode) }

// buildBaseline builds xlaned and xlane of git ref into dir (from `git
// archive`, so the work tree is not touched).
func buildBaseline(ctx context.Context, ref, dir string) error {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	log.Printf("build baseline %s", ref)
	archive := exec.CommandContext(ctx, "sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", ref, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %w\n%s", ref, err, out)
	}
	for _, name := range []string{"xlaned", "xlane"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s of %s: %w\n%s", name, ref, err, out)
		}
	}
	return nil
}

// observeArgs are the daemon flags of a variant.
func (x *xlaneTopo) observeArgs() []string {
	switch x.variant {
	case "metrics":
		return []string{"--metrics-addr", "unix:" + filepath.Join(x.dir, "metrics.sock")}
	case "off":
		return []string{"--monitor=false"}
	case "hubble":
		return []string{"--hubble", "--hubble-socket", filepath.Join(x.dir, "hubble.sock")}
	}
	return nil
}

// startObserver starts what a variant adds once the daemon runs: the
// scraper or the monitor client; Teardown stops it.
func (x *xlaneTopo) startObserver(ctx context.Context) error {
	switch x.variant {
	case "metrics":
		return x.startScraper()
	case "monitor", "monitor-all", "hubble":
		argv := []string{filepath.Join(x.bins, "xlane"), "--socket", filepath.Join(x.dir, "xlane.sock"), "monitor", "-o", "json"}
		if x.variant == "monitor-all" {
			argv = append(argv, "-t", "all")
		}
		name := "xlane monitor"
		if x.variant == "hubble" {
			bin, err := hubbleCLI(ctx)
			if err != nil {
				return err
			}
			argv = []string{bin, "observe", "--follow", "-o", "json", "--server", "unix://" + filepath.Join(x.dir, "hubble.sock")}
			name = "hubble observe"
		}
		// The events go nowhere: the client's cost is the daemon's and the
		// CLI's, not a disk's.
		p, err := harness.StartProc(name+" ("+x.name+")", os.DevNull, argv...)
		if err != nil {
			return err
		}
		x.observer = p
		x.undo.Push("stop "+p.Name, p.Stop)
		time.Sleep(500 * time.Millisecond)
		if p.Exited() {
			return fmt.Errorf("%s exited: %s", p.Name, p.Tail())
		}
	}
	return nil
}

// hubbleCLI is the stock hubble CLI of the release go.mod requires:
// XLANE_HUBBLE_BIN's, else scripts/hubble-bins.sh's (built once per
// machine into /var/cache/xlane/hubble).
func hubbleCLI(ctx context.Context) (string, error) {
	dir := os.Getenv("XLANE_HUBBLE_BIN")
	if dir == "" {
		out, err := exec.CommandContext(ctx, "scripts/hubble-bins.sh").Output()
		if err != nil {
			return "", fmt.Errorf("scripts/hubble-bins.sh (run from the repository's root): %w", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(dir, "hubble")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the hubble CLI: %w", err)
	}
	return bin, nil
}

// startScraper GETs /metrics every second, as a Prometheus would.
func (x *xlaneTopo) startScraper() error {
	sock := filepath.Join(x.dir, "metrics.sock")
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	scrape := func() error {
		resp, err := cl.Get("http://xlaned/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := scrape(); err != nil {
		return fmt.Errorf("metrics endpoint of %s: %w", x.name, err)
	}
	var n, failed atomic.Int64
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := scrape(); err != nil {
					failed.Add(1)
				} else {
					n.Add(1)
				}
			}
		}
	}()
	x.undo.Push("stop the scraper of "+x.name, func(context.Context) error {
		close(stop)
		log.Printf("%s: %d scrapes, %d failed", x.name, n.Load(), failed.Load())
		return nil
	})
	return nil
}

// A target of issue 19 and the metric it is judged on (docs/benchmarks.md,
// "Deciding the targets").
type target struct {
	name      string
	variant   string // the mode whose cost is judged
	reference string // against this mode
	limit     float64
	kind      string // the tests: "tcp" or "rate"
	metric    string
}

// Every target is against observability off (tc+off); BPF_PROG_RUN's
// are in progrun.go.
var targets = []target{
	{"no listener ≤ 2 %", "tc", "tc+off", 0.02, "rate", "forwarded_mpps"},
	{"no listener ≤ 2 %", "tc", "tc+off", 0.02, "tcp", "cpu_s_per_gbit"},
	{"monitor, default types ≤ 10 %", "tc+monitor", "tc+off", 0.10, "rate", "forwarded_mpps"},
	{"monitor, default types ≤ 10 %", "tc+monitor", "tc+off", 0.10, "tcp", "cpu_s_per_gbit"},
	{"monitor, all types ≤ 10 %", "tc+monitor-all", "tc+off", 0.10, "rate", "forwarded_mpps"},
	{"monitor, all types ≤ 10 %", "tc+monitor-all", "tc+off", 0.10, "tcp", "cpu_s_per_gbit"},
	{"hubble follower ≤ 10 %", "tc+hubble", "tc+off", 0.10, "rate", "forwarded_mpps"},
	{"hubble follower ≤ 10 %", "tc+hubble", "tc+off", 0.10, "tcp", "cpu_s_per_gbit"},
}

// costs are the per-repetition costs of mode a over mode b for metric m:
// a/b - 1 where lower is better, b/a - 1 where higher is better (so a
// positive cost is a's loss either way).
func costs(m MetricResult, a, b string) []float64 {
	sa, aok := m.Modes[a]
	sb, bok := m.Modes[b]
	if !aok || !bok {
		return nil
	}
	var out []float64
	for i := range min(len(sa.Samples), len(sb.Samples)) {
		x, y := sa.Samples[i], sb.Samples[i]
		if m.HigherBetter {
			x, y = y, x
		}
		if y > 0 && x > 0 {
			out = append(out, x/y-1)
		}
	}
	return out
}

// Verdict is a target judged on one test of the run.
type Verdict struct {
	Target  string    `json:"target"`
	Test    string    `json:"test"`
	Metric  string    `json:"metric"`
	Cost    float64   `json:"cost"`     // median of the per-repetition costs
	Costs   []float64 `json:"costs"`    // per repetition
	AANoise float64   `json:"aa_noise"` // largest |cost| of tc+aa over tc on the same test and metric (prog_run: see judgeProgRun)
	Result  string    `json:"result"`   // "met", "missed" or "not resolved"
	// Kind: "" end to end (Costs per repetition), "prog_run" BPF_PROG_RUN
	// (Costs per round).
	Kind string `json:"kind,omitempty"`
	// Note qualifies the result: a forwarded rate the generator may have
	// paced (more than 85 % delivered) understates a cost.
	Note string `json:"note,omitempty"`
}

// minVerdictReps is the fewest repetitions a verdict is given on.
const minVerdictReps = 3

// judge applies targets to the run: a cost is resolved where the A/A
// control's largest per-repetition |cost| on the same row is below the
// limit; then it is met when its median is within the limit.
func judge(rep *Report) []Verdict {
	var out []Verdict
	for _, tg := range targets {
		for _, t := range rep.Tests {
			if t.Kind != tg.kind {
				continue
			}
			for _, m := range t.Metrics {
				if m.Key != tg.metric {
					continue
				}
				cs, aa := costs(m, tg.variant, tg.reference), costs(m, "tc+aa", "tc")
				if len(cs) == 0 || len(aa) == 0 {
					continue
				}
				v := Verdict{Target: tg.name, Test: t.Title, Metric: m.Label, Cost: measure.Median(cs), Costs: cs}
				for _, c := range aa {
					v.AANoise = math.Max(v.AANoise, math.Abs(c))
				}
				switch {
				case len(cs) < minVerdictReps || len(aa) < minVerdictReps:
					v.Result = "not resolved"
					v.Note = fmt.Sprintf("fewer than %d repetitions: one A/A sample can be small by chance", minVerdictReps)
				case v.AANoise >= tg.limit:
					v.Result = "not resolved"
				case v.Cost <= tg.limit:
					v.Result = "met"
				default:
					v.Result = "missed"
				}
				if m.Key == "forwarded_mpps" && v.Note == "" {
					for _, dm := range t.Metrics {
						if dm.Key == "delivered_pct" && (dm.Modes[tg.variant].Median > 85 || dm.Modes[tg.reference].Median > 85) {
							v.Note = "more than 85 % delivered: the generator may have set the pace, the cost may be understated"
						}
					}
				}
				out = append(out, v)
			}
		}
	}
	return out
}

// verdictLines are the verdicts as text lines.
func verdictLines(vs []Verdict) []string {
	var out []string
	for _, v := range vs {
		if v.Kind == "prog_run" {
			out = append(out, fmt.Sprintf("%s, %s: cost %+.2f %% (per round p10 %+.2f to p90 %+.2f %%), A/A noise ±%.2f %% (p10–p90 of on-aa − on): %s (%s)",
				v.Target, v.Test, 100*v.Cost, 100*quantile(v.Costs, 0.1), 100*quantile(v.Costs, 0.9), 100*v.AANoise, strings.ToUpper(v.Result), v.Note))
			continue
		}
		lo, hi := slices.Min(v.Costs), slices.Max(v.Costs)
		out = append(out, fmt.Sprintf("%s, %s, %s: cost %+.1f %% (per repetition %+.1f to %+.1f %%), A/A noise ±%.1f %%: %s",
			v.Target, v.Test, v.Metric, 100*v.Cost, 100*lo, 100*hi, 100*v.AANoise, strings.ToUpper(v.Result))+
			map[bool]string{true: " (" + v.Note + ")"}[v.Note != ""])
	}
	return out
}
