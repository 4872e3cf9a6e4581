// Command accel is the socket acceleration benchmark (part of `make bench`,
// BENCH=accel): sockperf ping-pong and iperf3 over the same topologies with
// and without acceleration, interleaved in one run, with same-run ratios.
//
//	go run ./bench/accel -out bench/results     # 3 reps, 3 s runs: about 18 min on 2 cores
//	go run ./bench/accel -quick                 # 1 rep, 2 s runs
//	go run ./bench/accel -quick -duration 1s -sizes 65536 -streams 1 -topos loopback   # smoke
//
// Topologies, each measured "plain" (processes in a cgroup without
// acceleration) and "accel" (in a cgroup with `xlane accel enable`):
//   - loopback: client and server in one network namespace, 127.0.0.1;
//   - container: two endpoints of an xlane network (tc mode), one namespace
//     each, the client in one, the server in the other;
//   - chain: the write-up's client -> transparent proxy -> server on
//     loopback: `xlane proxy redirect` sends the client's connections to a
//     small relay (this binary, `proxy` mode) that reads SO_ORIGINAL_DST and
//     connects on (exempt by SO_MARK); both legs accelerated in "accel";
//   - proxies: wrk's requests/s through nginx and through haproxy to an
//     origin (this binary, `origin` mode), on loopback (proxies.go); only
//     where the self-test passes whole.
//
// It needs root, iperf3, sockperf, nsenter and ss (and nginx, haproxy
// and wrk for the proxies rows). It builds xlaned, runs it
// in a namespace of its own, makes two cgroups (xlb-<id>-plain and
// xlb-<id>-accel under the cgroup2 mount) and removes everything on exit,
// ^C included. Processes join a cgroup through this binary's `cgexec` mode.
// The self-test's result on this kernel is in the report. Its xlaned
// ignores the known failing cases (accel.IgnoreCasesEnv: splice, fionread,
// epollet; iperf3, sockperf and the relay neither splice, ask FIONREAD nor
// take a short read as drained), which no user can: the report lists them,
// and the proxies rows run only where no case failed. A test that fails (a client's error, output that
// does not parse) is listed under "Failed tests" in the report and the run
// goes on with the others; the command then exits non-zero.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/api"
)

type options struct {
	harness.RunFlags
	topos   []string
	sizes   []int
	streams []int
}

var allTopos = []string{"loopback", "container", "chain", "proxies"}

// ignoredCases are the self-test cases the benchmark's xlaned ignores
// (accel.IgnoreCasesEnv): none of the programs of the loopback, container
// and chain rows does what they test.
var ignoredCases = []string{"splice", "fionread", "epollet"}

func parseFlags() (options, error) {
	var o options
	var topos, sizes, streams string
	o.Register(flag.CommandLine, harness.RunFlagsUsage{
		Quick:           "development run: 1 repetition of 2 s (unless -reps/-duration are given)",
		Reps:            "repetitions; each runs every test plain and accelerated, interleaved",
		Duration:        "length of each iperf3 and sockperf run (whole seconds)",
		DefaultDuration: 3 * time.Second,
		Out:             "directory for accel-<date>.json and accel-latest.md",
		DefaultOut:      "bench/results",
		KeepTmp:         "keep the temp dir (logs)",
	})
	flag.StringVar(&topos, "topos", strings.Join(allTopos, ","), "topologies: "+strings.Join(allTopos, ", "))
	flag.StringVar(&sizes, "sizes", "64,1448,16384,65536,1048576", "iperf3 write sizes (-l), bytes (the write-up's table)")
	flag.StringVar(&streams, "streams", "1,4", "iperf3 parallel streams (-P)")
	if err := o.Parse(flag.CommandLine, os.Args[1:], map[string]string{"reps": "1", "duration": "2s"}); err != nil {
		return o, err
	}
	if o.Reps < 1 || o.Duration < time.Second {
		return o, errors.New("-reps must be >= 1 and -duration >= 1s")
	}
	var err error
	if o.topos, err = harness.ParseChoices("topos", topos, allTopos); err != nil {
		return o, err
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return o, fmt.Errorf("-sizes %q: not a size", s)
		}
		o.sizes = append(o.sizes, n)
	}
	for _, s := range strings.Split(streams, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 128 {
			return o, fmt.Errorf("-streams %q: want 1..128", s)
		}
		o.streams = append(o.streams, n)
	}
	return o, nil
}

func main() {
	// Helper modes: this binary as a process's way into a cgroup, and as
	// the chain's proxy.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "cgexec":
			cgexec(os.Args[2:])
		case "proxy":
			os.Exit(proxyMain(os.Args[2:]))
		case "origin":
			os.Exit(originMain(os.Args[2:]))
		}
	}
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench accel: ")
	o, err := parseFlags()
	if err != nil {
		log.Print(err)
		os.Exit(2)
	}
	os.Exit(harness.Main("accel", o.KeepTmp, func(ctx context.Context, tmp string, undo *harness.UndoStack) error {
		return run(ctx, o, tmp, undo)
	}))
}

// cgexec: cgexec DIR -- ARGV: join the cgroup DIR, then exec ARGV.
func cgexec(args []string) {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "usage: cgexec CGROUP -- ARGV...")
		os.Exit(2)
	}
	if err := os.WriteFile(filepath.Join(args[0], "cgroup.procs"), []byte("0"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "cgexec:", err)
		os.Exit(1)
	}
	argv := args[2:]
	path, err := execLookPath(argv[0])
	if err == nil {
		err = syscall.Exec(path, argv, os.Environ())
	}
	fmt.Fprintln(os.Stderr, "cgexec:", err)
	os.Exit(1)
}

// proxyMain: proxy PORT MARK: relay every connection to 127.0.0.1:PORT
// and [::1]:PORT to its original destination (SO_ORIGINAL_DST /
// IP6T_SO_ORIGINAL_DST), connecting with SO_MARK MARK. Plain read/write
// loops: no splice, which sockmap breaks on most kernels (docs/accel.md).
func proxyMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: proxy PORT MARK")
		return 2
	}
	mark, _ := strconv.Atoi(args[1])
	errc := make(chan error, 2)
	for _, a := range []string{"127.0.0.1", "::1"} {
		l, err := net.Listen("tcp", net.JoinHostPort(a, args[0]))
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxy:", err)
			return 1
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					errc <- err
					return
				}
				go relay(c.(*net.TCPConn), mark)
			}
		}()
	}
	fmt.Fprintln(os.Stderr, "proxy:", <-errc)
	return 1
}

func relay(c *net.TCPConn, mark int) {
	defer c.Close()
	dst, err := accel.OriginalDst(c)
	if err != nil {
		log.Printf("proxy: SO_ORIGINAL_DST: %v", err)
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark) })
		return serr
	}}
	up, err := d.Dial("tcp", dst.String())
	if err != nil {
		log.Printf("proxy: %v", err)
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		copyPlain(up, c)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	copyPlain(c, up)
	c.CloseWrite()
	<-done
}

func copyPlain(dst io.Writer, src io.Reader) {
	buf := make([]byte, 256<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// ---- the run ----

type variant struct {
	name string
	cg   string
	idx  int
}

type topo struct {
	name      string
	client    string // netns
	server    string // netns
	addr      netip.Addr
	iperfPort int // + variant index
	pingPort  int
}

// Row is one measured number of one test, per variant: medians over reps.
type Row struct {
	Topo   string             `json:"topo"`
	Test   string             `json:"test"`
	Metric string             `json:"metric"`
	Values map[string]float64 `json:"values"` // variant -> median
	Ratio  float64            `json:"accel_over_plain"`
	all    map[string][]float64
}

// Report is the JSON the run writes.
type Report struct {
	Started  time.Time       `json:"started"`
	Machine  harness.Machine `json:"machine"`
	Options  map[string]any  `json:"options"`
	SelfTest *accel.Report   `json:"self_test,omitempty"`
	// Ignored: cases that failed on this kernel and that the benchmark's
	// xlaned ignored (ignoredCases).
	Ignored []string `json:"ignored_cases,omitempty"`
	// NotRun: topologies left out, and why.
	NotRun   []string          `json:"not_run,omitempty"`
	Rows     []*Row            `json:"rows"`
	Counters map[string]uint64 `json:"counters,omitempty"`
	// Failed are the tests that failed (topology, variant, test: error).
	Failed []string `json:"failed,omitempty"`
}

func run(ctx context.Context, o options, tmp string, undo *harness.UndoStack) error {
	if err := harness.Preflight("namespaces, cgroups, BPF", true, "iperf3", "sockperf", "nsenter", "ss", "ip"); err != nil {
		return err
	}
	rep := &Report{Started: time.Now().UTC(), Machine: harness.DescribeMachine(ctx),
		Options: map[string]any{"reps": o.Reps, "duration_s": o.Duration.Seconds(), "topos": o.topos, "sizes": o.sizes, "streams": o.streams}}
	bins, id, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	node, lo, px, c1, c2 := id+"-node", id+"-lo", id+"-px", id+"-c1", id+"-c2"
	if err := harness.AddNamespaces(ctx, undo, node, lo, px, c1, c2); err != nil {
		return err
	}
	root, err := accel.Cgroup2Root()
	if err != nil {
		return err
	}
	variants := []variant{{"plain", filepath.Join(root, id+"-plain"), 0}, {"accel", filepath.Join(root, id+"-accel"), 1}}
	for _, v := range variants {
		if err := os.Mkdir(v.cg, 0o755); err != nil {
			return err
		}
		undo.Push("remove cgroup "+v.cg, func(context.Context) error { return rmdirRetry(v.cg) })
	}
	xdir := filepath.Join(tmp, "xlaned")
	os.MkdirAll(xdir, 0o755)
	os.Setenv(accel.IgnoreCasesEnv, strings.Join(ignoredCases, ","))
	if _, err := harness.StartXlaned(ctx, undo, harness.Xlaned{Name: "xlaned", Netns: node, Bins: bins, Dir: xdir,
		PinDir: "/sys/fs/bpf/" + id + "-node", Timeout: 30 * time.Second}); err != nil {
		return err
	}
	xl := func(args ...string) (string, error) { return harness.Xlane(ctx, bins, xdir, args...) }
	const subnet = "10.97.0.0/24"
	if _, err := xl("network", "create", "acc", "--subnet", subnet, "--mode", "tc", "--masquerade=false"); err != nil {
		return err
	}
	var eps []harness.Endpoint
	for _, ns := range []string{c1, c2} {
		out, err := xl("-o", "json", "endpoint", "add", "acc", "--netns", ns)
		if err != nil {
			return err
		}
		ep, err := harness.ParseEndpoint(out)
		if err != nil {
			return err
		}
		eps = append(eps, ep)
	}
	// Acceleration for the accel cgroup (known failing cases ignored).
	if _, err := xl("-o", "json", "accel", "enable", "--cgroup", variants[1].cg, "--net", "127.0.0.0/8", "--net", "::1/128", "--net", subnet); err != nil {
		return fmt.Errorf("accel enable: %w", err)
	}
	var st api.AccelStatus
	if out, err := xl("-o", "json", "accel", "status"); err == nil {
		json.Unmarshal([]byte(out), &st)
		rep.SelfTest = st.SelfTest
	}
	if rep.SelfTest != nil {
		rep.Ignored = rep.SelfTest.Failed(nil)
	}
	if len(rep.Ignored) > 0 {
		log.Printf("self-test on this kernel: %s; ignored for the benchmark", rep.SelfTest.Summary(ignoredCases))
	}
	proxies := slices.Contains(o.topos, "proxies")
	if proxies && len(rep.Ignored) > 0 {
		proxies = false
		rep.NotRun = append(rep.NotRun, fmt.Sprintf("proxies (nginx, haproxy): acceleration is unavailable on this kernel (self-test cases %s fail)", strings.Join(rep.Ignored, ", ")))
		log.Print(rep.NotRun[len(rep.NotRun)-1])
	}
	if proxies {
		if err := harness.Preflight("proxies", false, "nginx", "haproxy", "wrk"); err != nil {
			return err
		}
		if err := startProxies(ctx, undo, tmp, self, lo, variants); err != nil {
			return err
		}
	}

	topos := map[string]topo{
		"loopback":  {"loopback", lo, lo, netip.MustParseAddr("127.0.0.1"), 5201, 11111},
		"container": {"container", c1, c2, eps[1].IPv4, 5201, 11111},
		"chain":     {"chain", px, px, netip.MustParseAddr("127.0.0.1"), 5211, 11121},
	}
	const mark = 0x539
	// Servers per topology and variant, in the variant's cgroup; the chain's
	// proxies and redirects.
	for _, name := range o.topos {
		t, ok := topos[name]
		if !ok {
			continue // proxies: above
		}
		for _, v := range variants {
			ip, pp := strconv.Itoa(t.iperfPort+v.idx), strconv.Itoa(t.pingPort+v.idx)
			pin := []string{"taskset", "-c", latencyServerCPU}
			for _, s := range [][]string{
				{"iperf3", "-s", "-B", t.addr.String(), "-p", ip},
				append(pin, "sockperf", "sr", "--tcp", "-i", t.addr.String(), "-p", pp),
			} {
				if err := startIn(ctx, undo, tmp, self, v.cg, t.server, s...); err != nil {
					return err
				}
			}
			if name == "chain" {
				// One relay for iperf3 (not pinned), one for ping-pong
				// (pinned beside the sockperf server).
				for _, r := range []struct {
					port, proxy string
					pin         []string
				}{{ip, strconv.Itoa(15001 + v.idx), nil}, {pp, strconv.Itoa(15101 + v.idx), pin}} {
					if err := startIn(ctx, undo, tmp, self, v.cg, t.server, append(r.pin, self, "proxy", r.proxy, strconv.Itoa(mark))...); err != nil {
						return err
					}
					if _, err := xl("proxy", "redirect", "--port", r.port, "--to", r.proxy, "--cgroup", v.cg,
						"--exempt", "mark", "--mark", strconv.Itoa(mark)); err != nil {
						return err
					}
				}
			}
			for _, p := range []int{t.iperfPort + v.idx, t.pingPort + v.idx} {
				ap := netip.AddrPortFrom(t.addr, uint16(p))
				if err := harness.WaitFor(ctx, ap.String(), 10*time.Second, nil, func() bool { return harness.Listening(ctx, t.server, ap) }); err != nil {
					return err
				}
			}
		}
	}

	rows := map[string]*Row{}
	record := func(t topo, test, metric, variant string, v float64) {
		k := t.name + "|" + test + "|" + metric
		r, ok := rows[k]
		if !ok {
			r = &Row{Topo: t.name, Test: test, Metric: metric, Values: map[string]float64{}, all: map[string][]float64{}}
			rows[k] = r
			rep.Rows = append(rep.Rows, r)
		}
		r.all[variant] = append(r.all[variant], v)
	}
	counters := func() map[string]uint64 {
		out, err := xl("-o", "json", "accel", "status")
		var st api.AccelStatus
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return nil
		}
		return st.Counters
	}
	fail := func(t topo, v variant, test string, err error) {
		msg := fmt.Sprintf("%s %s %s: %v", t.name, v.name, test, err)
		log.Printf("failed: %s", msg)
		rep.Failed = append(rep.Failed, msg)
	}
	dur := strconv.Itoa(int(o.Duration.Seconds()))
	for rep := 0; rep < o.Reps; rep++ {
		log.Printf("repetition %d of %d", rep+1, o.Reps)
		if proxies {
			t := topo{name: "proxies", client: lo, server: lo}
			for _, px := range []struct {
				name string
				port int
			}{{"nginx", nginxPort}, {"haproxy", haproxyPort}} {
				test := fmt.Sprintf("wrk -c %s through %s, %s answers", wrkConns, px.name, sizeName(originBody))
				for _, v := range variants {
					rps, err := wrkRPS(ctx, self, v.cg, lo, px.port+v.idx, dur)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if err != nil {
						fail(t, v, test, err)
						continue
					}
					record(t, test, "requests/s", v.name, rps)
				}
			}
		}
		for _, name := range o.topos {
			t, ok := topos[name]
			if !ok {
				continue
			}
			for _, pl := range latencyPlacements() {
				test := "ping-pong 64 B, " + pl.name
				for _, v := range variants {
					out, err := harness.Run(ctx, cgArgv(self, v.cg, t.client, "taskset", "-c", pl.clientCPU, "sockperf", "pp", "--tcp",
						"-i", t.addr.String(), "-p", strconv.Itoa(t.pingPort+v.idx), "-t", dur, "-m", "64")...)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					l, perr := measure.ParseSockperf(out)
					if err != nil || perr != nil {
						fail(t, v, test, errors.Join(err, perr))
						continue
					}
					record(t, test, "avg µs", v.name, l.AvgUs)
					record(t, test, "p50 µs", v.name, l.P50Us)
					record(t, test, "p99 µs", v.name, l.P99Us)
					record(t, test, "p99.9 µs", v.name, p999(out))
				}
			}
			for _, size := range o.sizes {
				for _, streams := range o.streams {
					test := fmt.Sprintf("iperf3 -l %s -P %d", sizeName(size), streams)
					for _, v := range variants {
						var k0 map[string]uint64
						if v.name == "accel" {
							k0 = counters()
						}
						c0, _ := measure.ReadCPU()
						g0, gerr0 := cgroupCPU(v.cg)
						out, err := harness.Run(ctx, cgArgv(self, v.cg, t.client, "iperf3", "-c", t.addr.String(),
							"-p", strconv.Itoa(t.iperfPort+v.idx), "-t", dur, "-l", strconv.Itoa(size), "-P", strconv.Itoa(streams), "-J")...)
						c1, _ := measure.ReadCPU()
						g1, gerr1 := cgroupCPU(v.cg)
						if ctx.Err() != nil {
							return ctx.Err()
						}
						r, perr := measure.ParseIperf3([]byte(out))
						if perr != nil {
							fail(t, v, test, errors.Join(err, perr))
							continue
						}
						gbps := r.ReceivedBps / 1e9
						record(t, test, "Gbit/s", v.name, gbps)
						if gbps > 0 {
							record(t, test, "CPU-s/Gbit", v.name, measure.CPUPerGbit(c0, c1, gbps*r.Seconds))
							// The test's own processes only (client, server,
							// relay: the variant's cgroup), which other load
							// on the machine does not inflate.
							if gerr0 == nil && gerr1 == nil {
								record(t, test, "test CPU-s/Gbit", v.name, (g1-g0)/(gbps*r.Seconds))
							}
						}
						// How much of the accelerated run the fast path
						// carried, and how many directions fell back
						// because their reader lagged (docs/accel.md).
						if k1 := counters(); k0 != nil && k1 != nil {
							red := float64(k1["bytes_redirected"] - k0["bytes_redirected"])
							fb := float64(k1["fallback_bytes"] - k0["fallback_bytes"])
							if red+fb > 0 {
								record(t, test, "fast path % of bytes", v.name, 100*red/(red+fb))
							}
							record(t, test, "fallback_backlog", v.name, float64(k1["fallback_backlog"]-k0["fallback_backlog"]))
							// Every other reason that fired during the
							// run, to tell why a row falls back.
							for _, c := range slices.Sorted(maps.Keys(k1)) {
								if d := k1[c] - k0[c]; strings.HasPrefix(c, "fallback_") && c != "fallback_backlog" &&
									c != "fallback_bytes" && d > 0 {
									record(t, test, c, v.name, float64(d))
								}
							}
						}
					}
				}
			}
		}
	}
	for _, r := range rep.Rows {
		for v, xs := range r.all {
			r.Values[v] = measure.Median(xs)
		}
		if len(r.all) == 2 {
			r.Ratio = measure.Ratio(r.Values["accel"], r.Values["plain"])
		}
	}
	if out, err := xl("-o", "json", "accel", "status"); err == nil {
		var st api.AccelStatus
		if json.Unmarshal([]byte(out), &st) == nil {
			rep.Counters = st.Counters
		}
	}
	md := rep.markdown()
	js, _ := json.MarshalIndent(rep, "", "  ")
	if err := harness.PrintResults(o.Out, "accel", rep.Started, md, js); err != nil {
		return err
	}
	if len(rep.Failed) > 0 {
		return fmt.Errorf("%d tests failed (listed in the report)", len(rep.Failed))
	}
	return nil
}

// cgroupCPU is the CPU time, in seconds, the processes of cgroup cg have
// used (cpu.stat usage_usec, kept by every cgroup2 cgroup, also without the
// cpu controller): softirq work is charged to the task it interrupts, on
// loopback mostly the sender.
func cgroupCPU(cg string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(cg, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return float64(n) / 1e6, err
		}
	}
	return 0, fmt.Errorf("%s/cpu.stat: no usage_usec", cg)
}

func cgArgv(self, cg, ns string, argv ...string) []string {
	return append([]string{self, "cgexec", cg, "--"}, harness.NSExec(ns, argv...)...)
}

// startIn starts argv in cgroup cg and netns ns until the run ends.
// Ping-pong pins the sockperf server (and the chain's relay for it) to
// latencyServerCPU and the client to the same CPU or to another one. Not
// pinned, the latency is bimodal on this VM (the foundation benchmark's
// notes, bench/modes/tools.go): a message that wakes the other vCPU costs
// it an idle exit (this kernel runs with haltpoll.guest_halt_poll_ns=0),
// about 40 us per round trip whatever the datapath, so which placement the
// scheduler picked decided the row. "one CPU" shows what the datapath
// costs; "two CPUs" adds the wakeup. Throughput runs are not pinned.
const latencyServerCPU = "0"

type placement struct{ name, clientCPU string }

func latencyPlacements() []placement {
	p := []placement{{"one CPU", latencyServerCPU}}
	if runtime.NumCPU() > 1 {
		p = append(p, placement{"two CPUs", "1"})
	}
	return p
}

func startIn(ctx context.Context, undo *harness.UndoStack, tmp, self, cg, ns string, argv ...string) error {
	name := filepath.Base(cg) + "-" + argv[0] + "-" + strings.Join(argv[len(argv)-2:], "-")
	name = strings.ReplaceAll(name, "/", "_")
	p, err := harness.StartProc(name, filepath.Join(tmp, name+".log"), cgArgv(self, cg, ns, argv...)...)
	if err != nil {
		return err
	}
	undo.Push("stop "+name, p.Stop)
	return nil
}

func rmdirRetry(p string) error {
	var err error
	for range 50 {
		if err = os.Remove(p); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func cell(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.3g", v)
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}

// p999 reads sockperf's 99.9th percentile (measure.ParseSockperf stops at
// 99).
func p999(out string) float64 {
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "percentile 99.900 ="); i >= 0 {
			return measure.ParseFloat(strings.TrimSpace(l[i+len("percentile 99.900 ="):]))
		}
	}
	return 0
}

func (r *Report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Socket acceleration (%s)\n\n", r.Started.Format("2006-01-02 15:04Z"))
	fmt.Fprintf(&b, "Kernel %s, %d CPUs (%s); %v reps of %v s, medians; ratio = accel / plain (latency: lower is better; throughput: higher).\n\n",
		r.Machine.Kernel, r.Machine.NProc, r.Machine.CPUModel, r.Options["reps"], r.Options["duration_s"])
	if r.SelfTest != nil {
		fmt.Fprintf(&b, "Self-test: %s", r.SelfTest.Summary(r.Ignored))
		if len(r.Ignored) > 0 {
			fmt.Fprintf(&b, " — ignored by this benchmark's xlaned (%s; unavailable to users): %s", accel.IgnoreCasesEnv, strings.Join(r.Ignored, ", "))
		}
		b.WriteString(".\n\n")
	}
	for _, n := range r.NotRun {
		fmt.Fprintf(&b, "Not run: %s.\n\n", n)
	}
	b.WriteString("The write-up's figures: loopback ping-pong avg 14.8 → 10.0 µs (0.68×), p50 15.2 → 9.3 µs (0.61×); proxied chain iperf3 9.1 → 17.3 Gbit/s (1.9×; 64 KiB writes 10.1 → 15.0).\n\n")
	for _, t := range allTopos {
		var rows []*Row
		for _, row := range r.Rows {
			if row.Topo == t {
				rows = append(rows, row)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n| test | metric | plain | accel | accel/plain |\n|---|---|---:|---:|---:|\n", t)
		for _, row := range rows {
			p, pok := row.Values["plain"]
			a, aok := row.Values["accel"]
			if !pok || !aok {
				// Measured on one variant only (the fast path's share).
				fmt.Fprintf(&b, "| %s | %s | %s | %s | |\n", row.Test, row.Metric, cell(p, pok), cell(a, aok))
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %.3g | %.3g | %.2f× |\n", row.Test, row.Metric, p, a, row.Ratio)
		}
		b.WriteString("\n")
	}
	if len(r.Failed) > 0 {
		b.WriteString("Failed tests (no figure):\n\n")
		for _, f := range r.Failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("\n")
	}
	if len(r.Counters) > 0 {
		keys := make([]string, 0, len(r.Counters))
		for k := range r.Counters {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString("Counters after the run:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s %d;", k, r.Counters[k])
		}
		b.WriteString("\n")
	}
	return b.String()
}
