// Command scrape is the metrics endpoint's cost (`make bench BENCH=scrape`):
// what one Prometheus scrape of xlaned (--metrics-addr) costs the daemon as
// the node grows, scraped every second as Prometheus would.
//
//	go run ./bench/scrape -out bench/results     # 0/20 endpoints x 0/100k/1M conntrack entries, 10 s each
//	go run ./bench/scrape -quick                 # 3 s each, for development
//
// For each level: the scrape's time (p50, p99), its size and series, and
// the daemon's CPU time per scrape and share of one CPU at one scrape a
// second. The collector reads the BPF maps at scrape time (internal/metrics)
// and nothing per packet, so the datapath's own cost of being scraped is
// the CPU taken here; the overhead benchmark of issue 19 runs its traffic
// beside bench/internal/scrape for the datapath side. Conntrack entries
// are synthetic (written to the pinned xlane_ct, as test/e2e's scale tests
// do): a scrape walks the table once.
//
// It needs root and a bpffs; it builds xlaned and xlane itself and removes
// its namespaces, processes and pin dirs on exit.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
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

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/scrape"
	"github.com/xlane-dev/xlane/internal/bpf"
)

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	os.Exit(scrapeMain(os.Args[1:]))
}

type options struct {
	harness.RunFlags // Duration: scraping at each level
	endpoints        []int
	ct               []int
	every            time.Duration
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("scrape", flag.ContinueOnError)
	var eps, ct string
	o.Register(fs, harness.RunFlagsUsage{
		Quick:           "3 s per level (unless -duration is given)",
		Reps:            "(unused: one run per level)",
		Duration:        "scraping time at each level",
		DefaultDuration: 10 * time.Second,
		Out:             "directory for scrape-<date>.json and scrape-latest.md (\"\": print only)",
		KeepTmp:         "keep the temp dir (binaries, daemon log)",
	})
	fs.StringVar(&eps, "endpoints", "0,20", "endpoint counts, growing")
	fs.StringVar(&ct, "ct", "0,100000,1000000", "conntrack entries, growing (at most 2,000,000)")
	fs.DurationVar(&o.every, "interval", time.Second, "scrape interval")
	if err := o.Parse(fs, args, map[string]string{"duration": "3s"}); err != nil {
		return o, err
	}
	var err error
	if o.endpoints, err = parseCounts("endpoints", eps, 500); err != nil {
		return o, err
	}
	if o.ct, err = parseCounts("ct", ct, 2_000_000); err != nil {
		return o, err
	}
	if o.Duration < time.Second || o.every < 100*time.Millisecond {
		return o, errors.New("-duration >= 1s, -interval >= 100ms")
	}
	return o, nil
}

// parseCounts parses a growing list of counts from 0 to max.
func parseCounts(flagName, value string, max int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(value, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > max || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("-%s: %q: want growing numbers from 0 to %d", flagName, f, max)
		}
		out = append(out, n)
	}
	return out, nil
}

// sample is one level's scraping.
type sample struct {
	Endpoints    int     `json:"endpoints"`
	CTEntries    int     `json:"ct_entries"`
	Scrapes      int     `json:"scrapes"`
	Failed       int     `json:"failed"`
	P50ms        float64 `json:"p50_ms"`
	P99ms        float64 `json:"p99_ms"`
	Bytes        int     `json:"bytes"`
	Series       int     `json:"series"`
	CPUPerScrape float64 `json:"daemon_cpu_ms_per_scrape"`
	CPUSharePct  float64 `json:"daemon_cpu_pct"` // of one CPU, at this interval
}

type report struct {
	harness.RunHeader
	Samples []sample `json:"samples"`
}

func scrapeMain(args []string) int {
	o, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		log.Print(err)
		return 2
	}
	if err := harness.Preflight("BPF, namespaces", true, "ip", "nsenter"); err != nil {
		log.Print(err)
		return 1
	}
	return harness.Main("scrape", o.KeepTmp, func(ctx context.Context, tmp string, undo *harness.UndoStack) error {
		rep, err := run(ctx, o, tmp, undo)
		if err != nil {
			return err
		}
		js, _ := json.MarshalIndent(rep, "", "  ")
		return harness.PrintResults(o.Out, "scrape", rep.Started, markdown(rep), js)
	})
}

const metricsAddr = "127.0.0.1:9643"

func run(ctx context.Context, o options, tmp string, undo *harness.UndoStack) (*report, error) {
	rep := &report{RunHeader: harness.RunHeader{Started: time.Now(), NProc: runtime.NumCPU(), LoadStart: harness.LoadAvg(),
		Kernel: harness.KernelRelease(), CPU: harness.CPUModel(),
		Options: map[string]string{"duration": o.Duration.String(), "interval": o.every.String(),
			"endpoints": fmt.Sprint(o.endpoints), "ct": fmt.Sprint(o.ct)}}}
	bins, runID, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return nil, err
	}
	node := runID + "-node"
	if err := harness.AddNamespaces(ctx, undo, node); err != nil {
		return nil, err
	}
	maxCT := o.ct[len(o.ct)-1]
	x := harness.Xlaned{Name: "xlaned", Netns: node, Bins: bins, Dir: tmp, PinDir: "/sys/fs/bpf/" + runID + "-node",
		Args:    []string{"--metrics-addr", metricsAddr, "--ct-size", fmt.Sprint(max(1<<20, 2*maxCT)), "--docker-plugin-socket="},
		Timeout: 30 * time.Second}
	p, err := harness.StartXlaned(ctx, undo, x)
	if err != nil {
		return nil, err
	}
	if _, err := harness.Xlane(ctx, bins, tmp, "network", "create", "blue", "--subnet", "10.70.0.0/16", "--mode", "tc"); err != nil {
		return nil, err
	}
	ct, err := ebpf.LoadPinnedMap(filepath.Join(x.PinDir, "maps", "xlane_ct"), nil)
	if err != nil {
		return nil, err
	}
	defer ct.Close()
	client := scrape.Client("/var/run/netns/" + node)
	url := "http://" + metricsAddr + "/metrics"
	eps, filled := 0, 0
	for _, ne := range o.endpoints {
		for ; eps < ne; eps++ {
			c := fmt.Sprintf("%s-c%d", runID, eps)
			if err := harness.AddNamespaces(ctx, undo, c); err != nil {
				return nil, err
			}
			if _, err := harness.Xlane(ctx, bins, tmp, "endpoint", "add", "blue", "--netns", c); err != nil {
				return nil, err
			}
		}
		for _, nct := range o.ct {
			if nct < filled { // a new endpoint level starts the table over
				if _, err := harness.Xlane(ctx, bins, tmp, "ct", "flush"); err != nil {
					return nil, err
				}
				filled = 0
			}
			if err := fillCT(ct, filled, nct); err != nil {
				return nil, fmt.Errorf("fill conntrack to %d: %w", nct, err)
			}
			filled = nct
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			stop := scrape.Start(client, url, o.every, p.Pid())
			select {
			case <-ctx.Done():
			case <-time.After(o.Duration):
			}
			r := stop()
			s := sample{Endpoints: ne, CTEntries: nct, Scrapes: len(r.Scrapes), Failed: len(r.Scrapes) - r.OK(),
				P50ms: ms(r.Quantile(0.5)), P99ms: ms(r.Quantile(0.99)), Bytes: r.Last().Bytes, Series: r.Last().Series,
				CPUPerScrape: ms(r.CPUPerScrape())}
			if r.Wall > 0 {
				s.CPUSharePct = 100 * r.DaemonCPU.Seconds() / r.Wall.Seconds()
			}
			log.Printf("%d endpoints, %d ct entries: %d scrapes, p50 %.1f ms, p99 %.1f ms, %d series, daemon %.1f ms CPU per scrape",
				s.Endpoints, s.CTEntries, s.Scrapes, s.P50ms, s.P99ms, s.Series, s.CPUPerScrape)
			rep.Samples = append(rep.Samples, s)
		}
	}
	rep.Finished, rep.LoadEnd = time.Now(), harness.LoadAvg()
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fillCT writes synthetic established entries [from, to) into xlane_ct,
// live for a day (the GC leaves them).
func fillCT(m *ebpf.Map, from, to int) error {
	const chunk = 1 << 16
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	expires := uint64(ts.Nano()) + uint64(24*time.Hour)
	keys := make([]bpf.CTKey, 0, chunk)
	vals := make([]bpf.CTVal, 0, chunk)
	for i := from; i < to; {
		keys, vals = keys[:0], vals[:0]
		for ; i < to && len(keys) < chunk; i++ {
			k := bpf.CTKey{Proto: unix.IPPROTO_TCP, Sport: htons(uint16(1024 + i&0xff)), Dport: htons(1),
				Saddr: [16]byte{10: 0xff, 11: 0xff, 12: 100, 13: byte(64 + i>>24&0x3f), 14: byte(i >> 16), 15: byte(i >> 8)},
				Daddr: [16]byte{10: 0xff, 11: 0xff, 12: 100, 13: 127, 15: 1}}
			keys = append(keys, k)
			vals = append(vals, bpf.CTVal{Expires: expires, State: uint8(bpf.CTEstablished), Packets: 1, Bytes: 64})
		}
		if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
			return err
		}
	}
	return nil
}

// htons turns a port into the network-order value a ct_key field holds.
func htons(p uint16) uint16 {
	return binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, p))
}

func markdown(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Metrics scrape cost (bench/scrape)\n\n%s, %s, %d CPUs; %s; one scrape every %s for %s per level.\n\n",
		r.Started.UTC().Format(time.RFC3339), r.Kernel, r.NProc, r.CPU, r.Options["interval"], r.Options["duration"])
	b.WriteString("| endpoints | conntrack entries | scrapes | failed | p50 ms | p99 ms | bytes | series | daemon CPU ms / scrape | daemon CPU % |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %.1f | %.1f | %d | %d | %.1f | %.2f |\n",
			s.Endpoints, s.CTEntries, s.Scrapes, s.Failed, s.P50ms, s.P99ms, s.Bytes, s.Series, s.CPUPerScrape, s.CPUSharePct)
	}
	return b.String()
}
