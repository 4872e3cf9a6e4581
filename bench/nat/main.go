// Command nat is the conntrack/NAT/services benchmark (`make bench BENCH=nat`).
//
//	go run ./bench/nat -out bench/results      # 3 reps x 5 s, 1/1,000/10,000/100,000 services
//	go run ./bench/nat -quick                  # 1 rep x 2 s, for development
//	go run ./bench/nat -levels 1,1000 -modes xlane,iptables-nft -gc=false
//
// Connections per second and connection latency (connect, read one byte,
// close) from a client container to service VIPs, with 1, 1,000, 10,000
// and 100,000 services programmed, through xlane's tc datapath and through the same
// services as kube-proxy's iptables rules (nft and legacy backends) on a
// plain routed node; every mode in the same run, interleaved; the time to
// program each level (xlane: one apply; iptables: one restore), xlane's
// backend-change latency and kernel memory per service; 1,000 services
// sharing three backends beside the distinct-backend rate. Then memory
// per conntrack entry and the GC's CPU at a million entries. See
// topo.go for the topology, test/tools/connrate for the load generator (this binary
// run as `nat nat-client` and `nat nat-server` inside the namespaces) and
// gc.go for the conntrack GC measurement.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	// The load generator and its backends are this binary too, run in the
	// namespaces by natNode (test/tools/connrate).
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "nat-client":
			os.Exit(connrate.Client(os.Args[2:]))
		case "nat-server":
			os.Exit(connrate.Server(os.Args[2:]))
		}
	}
	os.Exit(natMain(os.Args[1:]))
}

type natOptions struct {
	harness.RunFlags
	levels []int
	conc   int
	modes  []string
	shared int
	gc     bool
}

func parseNATFlags(args []string) (natOptions, error) {
	var o natOptions
	fs := flag.NewFlagSet("nat", flag.ContinueOnError)
	var levels, modes string
	o.Register(fs, harness.RunFlagsUsage{
		Quick:           "1 repetition of 2 s (unless -reps/-duration are given)",
		Reps:            "repetitions; each runs every test once per mode, modes interleaved",
		Duration:        "length of each load run",
		DefaultDuration: 5 * time.Second,
		Out:             "directory for nat-<date>.json and nat-latest.md (\"\": print only)",
		KeepTmp:         "keep the temp dir (binaries, logs)",
	})
	fs.StringVar(&levels, "levels", "1,1000,10000,100000", "numbers of services programmed, in run order (only ever growing)")
	fs.IntVar(&o.conc, "conc", 4, "concurrent connections of the rate test")
	fs.StringVar(&modes, "modes", strings.Join(natModes, ","), "modes to compare")
	fs.IntVar(&o.shared, "shared", 1000, "then add this many services sharing the same three backends and run the rate test on them (0: skip)")
	fs.BoolVar(&o.gc, "gc", true, "measure conntrack memory per entry and GC CPU at 1M entries")
	if err := o.Parse(fs, args, map[string]string{"reps": "1", "duration": "2s"}); err != nil {
		return o, err
	}
	var err error
	if o.levels, err = harness.ParseLevels(levels, natMaxServices, true); err != nil {
		return o, err
	}
	if o.modes, err = harness.ParseChoices("modes", modes, natModes); err != nil {
		return o, err
	}
	if o.Reps < 1 || o.Duration < time.Second || o.conc < 1 || o.shared < 0 || o.shared > 40000 {
		return o, errors.New("-reps >= 1, -duration >= 1s, -conc >= 1, 0 <= -shared <= 40000")
	}
	if n := o.levels[len(o.levels)-1] + o.shared; slices.Contains(o.modes, "iptables-legacy") && n > natLegacyMaxServices {
		return o, fmt.Errorf("-modes iptables-legacy: %d services (-levels and -shared) make a legacy nat table of ~%d MiB, "+
			"past the kernel's 512 MiB per table; at most %d, or leave iptables-legacy out",
			n, n*4032>>20, natLegacyMaxServices)
	}
	return o, nil
}

// natSample is one load run of one mode.
type natSample struct {
	Level int             `json:"services"`
	Test  string          `json:"test"`
	Mode  string          `json:"mode"`
	Rep   int             `json:"rep"`
	R     connrate.Result `json:"result"`
}

// natReport is everything one run found.
type natReport struct {
	harness.RunHeader
	Iptables map[string]string   // mode -> version
	Program  map[string][]string // mode -> "N services: T"
	// xlane only, per level: backend changes through the API (ms) and
	// kernel memory of the services (status).
	BackendChangeMs map[int][]float64
	Memory          map[int]*api.ServicesMemory
	Samples         []natSample
	Shared          []natSample
	State           map[string]string // mode -> conntrack state after the runs
	GC              *natGCResult
	Notes           []string
}

func natMain(args []string) (code int) {
	o, err := parseNATFlags(args)
	if err != nil {
		log.Print(err)
		return 2
	}
	if err := natPreflight(o); err != nil {
		log.Print(err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		log.Print(err)
		return 1
	}
	return harness.Main("nat-", o.KeepTmp, func(ctx context.Context, tmp string, cleanup *harness.UndoStack) error {
		rep, err := natBenchmark(ctx, o, self, tmp, cleanup)
		if err != nil {
			return err
		}
		j, _ := json.MarshalIndent(rep, "", "  ")
		return harness.PrintResults(o.Out, "nat", rep.Started, natMarkdown(rep, o), j)
	})
}

func natPreflight(o natOptions) error {
	tools := []string{"go", "ip", "nsenter", "bpftool"}
	for _, m := range o.modes {
		if m != "xlane" {
			tools = append(tools, "iptables-"+strings.TrimPrefix(m, "iptables-")+"-restore")
		}
	}
	return harness.Preflight("network namespaces, BPF, iptables", false, tools...)
}

func natBenchmark(ctx context.Context, o natOptions, self, tmp string, cleanup *harness.UndoStack) (*natReport, error) {
	rep := &natReport{RunHeader: harness.RunHeader{Started: time.Now(), NProc: runtime.NumCPU(), LoadStart: harness.LoadAvg(),
		Kernel: harness.KernelRelease(), CPU: harness.CPUModel(),
		Options: map[string]string{
			"duration": o.Duration.String(), "reps": fmt.Sprint(o.Reps), "conc": fmt.Sprint(o.conc),
			"levels": fmt.Sprint(o.levels), "modes": strings.Join(o.modes, ","), "shared": fmt.Sprint(o.shared),
		}},
		Iptables: map[string]string{}, Program: map[string][]string{}, State: map[string]string{},
		BackendChangeMs: map[int][]float64{}, Memory: map[int]*api.ServicesMemory{}}
	if out, err := harness.Run(ctx, "git", "rev-parse", "--short", "HEAD"); err == nil {
		rep.GitCommit = strings.TrimSpace(out)
	}
	for _, m := range o.modes {
		if m != "xlane" {
			v, _ := harness.Run(ctx, "iptables-"+strings.TrimPrefix(m, "iptables-"), "--version")
			rep.Iptables[m] = strings.TrimSpace(v)
		}
	}
	log.Printf("machine: kernel %s, %d CPUs, loadavg %s", rep.Kernel, rep.NProc, rep.LoadStart)
	bins, runID, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return nil, err
	}

	maxSvcs := o.levels[len(o.levels)-1]
	var nodes []*natNode
	for i, m := range o.modes {
		n := newNATNode(m, runID, 180+i, bins, tmp)
		cleanup.Push("tear down "+m, func(context.Context) error { return n.Teardown() })
		log.Printf("setup %s (servers on %d ports per backend)", m, maxSvcs+1)
		if err := n.Setup(ctx, self, maxSvcs); err != nil {
			return nil, fmt.Errorf("setup %s: %w", m, err)
		}
		nodes = append(nodes, n)
	}

	writeTargets := func(name string, vips func(i int) string, n int) (string, error) {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString(vips(i) + "\n")
		}
		p := filepath.Join(tmp, name)
		return p, os.WriteFile(p, []byte(b.String()), 0o644)
	}
	tests := []struct {
		id   string
		conc int
	}{{"rate", o.conc}, {"latency", 1}}

	for _, level := range o.levels {
		for _, n := range nodes {
			d, err := n.Program(ctx, level, 0)
			if err != nil {
				return nil, err
			}
			rep.Program[n.mode] = append(rep.Program[n.mode], fmt.Sprintf("%d services: %.1f s", level, d.Seconds()))
			log.Printf("%s: %d services programmed in %.1f s", n.mode, level, d.Seconds())
			if n.mode != "xlane" {
				continue
			}
			ds, err := n.BackendChanges(ctx, 10)
			if err != nil {
				return nil, err
			}
			for _, d := range ds {
				rep.BackendChangeMs[level] = append(rep.BackendChangeMs[level], float64(d.Microseconds())/1000)
			}
			if rep.Memory[level], err = n.ServicesMemory(ctx); err != nil {
				return nil, err
			}
		}
		targets, err := writeTargets(fmt.Sprintf("targets-%d", level), func(i int) string {
			return fmt.Sprintf("%s:%d", natVIP(i), natVIPPort)
		}, level)
		if err != nil {
			return nil, err
		}
		// Every path must work before it is measured.
		for _, n := range nodes {
			r, err := n.Load(ctx, self, targets, time.Second, 1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n.mode, err)
			}
			if r.OK == 0 || r.Failed > 0 {
				return nil, fmt.Errorf("%s with %d services: check run: %d ok, %d failed %v", n.mode, level, r.OK, r.Failed, r.Errors)
			}
		}
		for r := 1; r <= o.Reps; r++ {
			for _, t := range tests {
				for k := range nodes {
					n := nodes[(k+r-1)%len(nodes)] // rotate the order per repetition
					res, err := n.Load(ctx, self, targets, o.Duration, t.conc)
					if err != nil {
						return nil, fmt.Errorf("%s %d services %s: %w", n.mode, level, t.id, err)
					}
					rep.Samples = append(rep.Samples, natSample{Level: level, Test: t.id, Mode: n.mode, Rep: r, R: res})
					log.Printf("%6d services rep %d %-7s %-15s %8.0f conn/s  p50 %6.1f µs  p99 %7.1f µs  failed %d %v",
						level, r, t.id, n.mode, res.CPS, res.P50Us, res.P99Us, res.Failed, res.Errors)
				}
			}
		}
	}
	if o.shared > 0 {
		for _, n := range nodes {
			d, err := n.Program(ctx, n.services, o.shared)
			if err != nil {
				return nil, err
			}
			rep.Program[n.mode] = append(rep.Program[n.mode], fmt.Sprintf("+%d shared-backend services: %.1f s", o.shared, d.Seconds()))
		}
		targets, err := writeTargets("targets-shared", func(i int) string {
			return fmt.Sprintf("%s:%d", natSharedVIP(i), natVIPPort)
		}, o.shared)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			res, err := n.Load(ctx, self, targets, o.Duration, o.conc)
			if err != nil {
				return nil, fmt.Errorf("%s shared: %w", n.mode, err)
			}
			rep.Shared = append(rep.Shared, natSample{Level: o.shared, Test: "rate-shared", Mode: n.mode, Rep: 1, R: res})
			log.Printf("shared backends: %-15s %8.0f conn/s  failed %d %v", n.mode, res.CPS, res.Failed, res.Errors)
		}
	}
	for _, n := range nodes {
		rep.State[n.mode] = n.State(ctx)
	}
	if o.gc {
		log.Printf("conntrack memory and GC at 1M entries")
		g, err := natMeasureCTGC(ctx, filepath.Join("/sys/fs/bpf", runID+"-natgc"), 3)
		if err != nil {
			return nil, fmt.Errorf("gc: %w", err)
		}
		rep.GC = &g
	}
	rep.LoadEnd = harness.LoadAvg()
	rep.Finished = time.Now()
	return rep, nil
}

// natNearestLevel is the level closest to n (0: none).
func natNearestLevel(levels []int, n int) int {
	best := 0
	for _, l := range levels {
		if best == 0 || abs(l-n) < abs(best-n) {
			best = l
		}
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// natMedian is the median of metric over the samples of (level, test, mode).
func natMedian(ss []natSample, level int, test, mode string, metric func(connrate.Result) float64) (float64, int) {
	var xs []float64
	for _, s := range ss {
		if s.Level == level && s.Test == test && s.Mode == mode {
			xs = append(xs, metric(s.R))
		}
	}
	return natMedianOf(xs), len(xs)
}

func natMarkdown(rep *natReport, o natOptions) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("Run of %s, %s → %s: kernel %s, %d × %s; loadavg %s at the start, %s at the end; %d repetitions × %s per test, modes rotated per repetition; commit %s.\n\n",
		rep.Started.UTC().Format("2006-01-02 15:04 MST"), rep.Started.Format("15:04"), rep.Finished.Format("15:04"),
		rep.Kernel, rep.NProc, rep.CPU, rep.LoadStart, rep.LoadEnd, o.Reps, o.Duration, rep.GitCommit)
	head := "| services | test | metric |"
	sep := "|---:|---|---|"
	for _, m := range o.modes {
		head += " " + m + " |"
		sep += "---:|"
	}
	var base []string
	for _, m := range o.modes {
		if m != "xlane" && slices.Contains(o.modes, "xlane") {
			base = append(base, m)
			head += " xlane vs " + m + " |"
			sep += "---:|"
		}
	}
	w("%s\n%s\n", head, sep)
	type metric struct {
		test, label string
		higher      bool
		f           func(connrate.Result) float64
		digits      int
	}
	metrics := []metric{
		{"rate", fmt.Sprintf("conn/s, %d clients ↑", o.conc), true, func(r connrate.Result) float64 { return r.CPS }, 0},
		{"rate", "p99 µs (under load) ↓", false, func(r connrate.Result) float64 { return r.P99Us }, 0},
		{"rate", "failed connections", false, func(r connrate.Result) float64 { return float64(r.Failed) }, 0},
		{"latency", "p50 µs, 1 client ↓", false, func(r connrate.Result) float64 { return r.P50Us }, 1},
		{"latency", "p99 µs, 1 client ↓", false, func(r connrate.Result) float64 { return r.P99Us }, 1},
	}
	for _, level := range o.levels {
		for i, mt := range metrics {
			lv, test := "", ""
			if i == 0 {
				lv = fmt.Sprint(level)
			}
			if i == 0 || mt.test != metrics[i-1].test {
				test = map[string]string{"rate": "connect, 1 byte, close", "latency": "same, one at a time"}[mt.test]
			}
			row := fmt.Sprintf("| %s | %s | %s |", lv, test, mt.label)
			vals := map[string]float64{}
			for _, m := range o.modes {
				v, n := natMedian(rep.Samples, level, mt.test, m, mt.f)
				vals[m] = v
				if n == 0 {
					row += " – |"
				} else {
					row += fmt.Sprintf(" %.*f |", mt.digits, v)
				}
			}
			for _, m := range base {
				if mt.label == "failed connections" || vals[m] == 0 {
					row += " |"
				} else {
					row += fmt.Sprintf(" %.2fx |", vals["xlane"]/vals[m])
				}
			}
			w("%s\n", row)
		}
	}
	w("\nMedians over the repetitions; ratios are xlane ÷ baseline (conn/s: higher is better for xlane; latency: lower is).\n")
	if len(rep.Shared) > 0 {
		w("\nServices sharing backends (%d more services, all to the same three backends on one port; one %s run per mode):\n\n", o.shared, o.Duration)
		for _, s := range rep.Shared {
			total := s.R.OK + s.R.Failed
			w("- %s: %.0f conn/s, %d of %d connections failed (%.1f %%) %v\n", s.Mode, s.R.CPS, s.R.Failed, total,
				100*float64(s.R.Failed)/float64(max(total, 1)), s.R.Errors)
		}
	}
	if len(rep.Shared) > 0 {
		if lv := natNearestLevel(o.levels, o.shared); lv > 0 {
			for _, s := range rep.Shared {
				if v, n := natMedian(rep.Samples, lv, "rate", s.Mode, func(r connrate.Result) float64 { return r.CPS }); n > 0 && v > 0 {
					w("- %s: shared ÷ distinct backends (%d services) %.2fx\n", s.Mode, lv, s.R.CPS/v)
				}
			}
		}
	}
	w("\nProgramming the services (xlane: one apply request per level with the new services; iptables: kube-proxy-style full restore):\n\n")
	for _, m := range o.modes {
		w("- %s: %s\n", m, strings.Join(rep.Program[m], "; "))
	}
	if len(rep.BackendChangeMs) > 0 {
		w("\nxlane, one backend change through the API (PATCH /v1/services/NAME: store transaction and datapath; a backend removed, then put back) and kernel memory of the services (`xlane status`):\n\n")
		w("| services | backend change p50 ms | max ms | kernel memory | fixed part | per service |\n|---:|---:|---:|---:|---:|---:|\n")
		for _, lv := range o.levels {
			ds := slices.Clone(rep.BackendChangeMs[lv])
			slices.Sort(ds)
			if len(ds) == 0 {
				continue
			}
			mem, fixed, per := "–", "–", "–"
			if m := rep.Memory[lv]; m != nil {
				mem, per = fmt.Sprintf("%.1f MiB", float64(m.TableBytes+m.MapBytes)/(1<<20)), fmt.Sprintf("%d B", m.PerServiceBytes)
				fixed = fmt.Sprintf("%.1f MiB", float64(m.FixedBytes)/(1<<20))
			}
			w("| %d | %.2f | %.2f | %s | %s | %s |\n", lv, ds[len(ds)/2], ds[len(ds)-1], mem, fixed, per)
		}
	}
	w("\nConnection tracking after the runs:\n\n")
	for _, m := range o.modes {
		w("- %s: %s\n", m, rep.State[m])
	}
	for m, v := range rep.Iptables {
		w("- %s: %s\n", m, v)
	}
	if g := rep.GC; g != nil {
		w("\nConntrack memory and GC at %d entries (%d expired; a scratch xlane_ct of %d, filled directly; medians of %d passes):\n\n", g.Entries, g.Expired, g.MaxEntries, g.Reps)
		w("| | per entry | per connection (2 entries) |\n|---|---:|---:|\n")
		w("| `xlane ct stats` bytes_per_entry (estimate) | %d B | %d B |\n", g.StatsBytesPerEntry, 2*g.StatsBytesPerEntry)
		w("| bpftool bytes_memlock, empty → full | %.0f B | %.0f B |\n", g.MemlockPerEntry, 2*g.MemlockPerEntry)
		w("| kernel slab actually allocated (%s) | %.0f B | %.0f B |\n", g.SlabGrew, g.SlabPerEntry, 2*g.SlabPerEntry)
		w("| hash buckets (preallocated: memlock of the empty table %d B) | %.0f B | %.0f B |\n", g.MemlockEmpty,
			float64(g.MemlockEmpty)/float64(g.MaxEntries), 2*float64(g.MemlockEmpty)/float64(g.MaxEntries))
		if g.NfConntrackObjSize > 0 {
			w("| Linux nf_conntrack (slab object, both directions; plus 8 B per bucket) | | %d B |\n", g.NfConntrackObjSize)
		}
		w("\n| GC pass over %d entries | CPU ms | wall ms |\n|---|---:|---:|\n", g.Entries)
		w("| batched (BPF_MAP_LOOKUP_BATCH + DELETE_BATCH, 4096 per call), deleting %d | %.0f | %.0f |\n", g.Expired, g.BatchCPU, g.BatchWall)
		w("| previous: Map.Iterate + Delete per entry, deleting %d | %.0f | %.0f |\n", g.Expired, g.LegacyCPU, g.LegacyWall)
		w("| batched, nothing to delete | %.0f | %.0f |\n", g.BatchNoopCPU, g.BatchNoopWall)
		w("| previous, nothing to delete | %.0f | %.0f |\n", g.LegacyNoopCPU, g.LegacyNoopWall)
		w("| `xlane ct stats` (batched count) | %.0f | |\n| `xlane ct flush` (LOOKUP_AND_DELETE_BATCH) | %.0f | |\n", g.StatsCPU, g.FlushCPU)
	}
	for _, n := range rep.Notes {
		w("\n%s\n", n)
	}
	return b.String()
}
