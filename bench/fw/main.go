// Command fw is the firewall drop-rate benchmark (`make bench BENCH=fw`).
//
//	go run ./bench/fw -out bench/results       # 3 reps x 5 s, 1/1,000/10,000 rules, 1, 256 and 4096 flows, iperf3 (~16 min with two flow counts; the third adds half the drop runs again)
//	go run ./bench/fw -quick                   # 1 rep x 1 s, for development
//	go run ./bench/fw -levels 1,1000 -variants xlane-native,iptables -iperf=false -flows 256
//
// Dropped packets per second at 64 bytes: the bench/gen live-frames
// generator (BPF_PROG_RUN, XDP_TX) in a "gen" namespace writes frames into
// a veth whose far side, in a "dut" namespace, carries the filter. The
// frames are UDP from one source address to port 9, as one flow (source
// port 40000) or as N (-flows: the source port cycles over 40000..40000+N-1,
// one step per frame, so consecutive frames are different flows); every
// drop run is made once per flow count, interleaved, so each flow count's
// ratios are same-run, same-traffic:
//
//	gen netns                   dut netns
//	generator --> g0 ==veth== d0 [filter: drop] --> (nothing)
//	CPU 1 (SCHED_FIFO 40)       d0's NAPI: threaded, CPU 0, SCHED_FIFO 50
//	+ backfill: CPU 0, FIFO 1
//
// Variants, each in its own pair of namespaces, compared in one run with
// their repetitions interleaved:
//   - xlane-native:  xlaned --uplink d0 --uplink-xdp-mode native; the rules
//     are an uplink-scope rule set (xlane fw apply)
//   - xlane-native-stateless: xlane-native with `established: false` (no
//     conntrack lookup: what iptables raw and nftables netdev do)
//   - xlane-generic: the same with --uplink-xdp-mode generic
//   - iptables:      iptables-restore into raw PREROUTING (whichever backend
//     iptables is here; the report names it)
//   - nftables:      an nft netdev ingress chain on d0
//   - xdp-drop:      not a firewall but the ceiling: a native XDP program
//     that counts and drops every frame unparsed (no rules); what it drops
//     is the most any XDP filter can drop on this veth
//   - xdp-drop-read: the same after reading the frame's UDP port: the
//     ceiling of a filter that looks at the packet (the frame was written
//     on the generator's CPU; reading it costs a cache transfer)
//
// With N rules, every variant has the same rule set shape: N-1 rules
// "drop udp from 10.a.b.c/32 to port 9" that do not match, then the one
// that does (the generator's source); the filter's own counter of that
// rule is the dropped count. The generator (-gen, default
// 256+backfill+anchor: 256 frames per flush, a second thread on CPU 0
// below the NAPI thread's priority that fills only the receiver's idle
// time, and the program held in the XDP dispatcher so that no
// BPF_PROG_RUN call waits for RCU grace periods) outruns a filter, so what
// the filter drops per second is its capacity; frames that do not fit
// d0's ring are lost before it (offered vs dropped). Whether it did is
// measured per run: the receiver's own time (d0's NAPI thread, schedstat:
// busy share, ns per drop) and its idle time (the backfill thread's run
// time); a rate with the receiver idle over 5 % is marked as the
// generator's. Also CPU 0's /proc/stat and the hypervisor's steal. Then
// iperf3 TCP throughput from gen to dut (allowed traffic) with the largest
// rule set loaded and with no rules.
//
// Everything happens in namespaces named xlb-<random>-fw*, removed on exit,
// ^C included; the bench exits non-zero only when the harness fails, never
// because of the numbers.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/bench/internal/rate"
	"github.com/xlane-dev/xlane/internal/api"
)

// fwVariants are the filters compared, in run order.
var fwVariants = []string{"xlane-native", "xlane-native-stateless", "xlane-generic", "iptables", "nftables", "xdp-drop", "xdp-drop-read"}

// fwStateless is the suffix of an xlane variant whose rule set says
// `established: false`: no conntrack lookup for a packet a rule matched,
// the semantics of iptables' raw table and an nftables netdev chain, which
// run before conntrack.
const fwStateless = "-stateless"

// fwCeiling is the variant that is not a firewall: a bare XDP_DROP program,
// the most any XDP filter can drop on this veth (ceiling.go); fwCeilingRead
// the same after reading the frame's UDP port, as any filter must.
const (
	fwCeiling     = "xdp-drop"
	fwCeilingRead = "xdp-drop-read"
)

// isCeiling: v is one of the ceilings, not a firewall.
func isCeiling(v string) bool { return v == fwCeiling || v == fwCeilingRead }

var (
	fwGenAddr = netip.MustParseAddr("198.18.0.2") // g0: the generator's source
	fwDUTAddr = netip.MustParseAddr("198.18.0.1") // d0
)

const fwDropPort = 9

// fwGenDefault is the generator's default setting (-gen): 256 frames per
// flush of BPF_PROG_RUN (at most one wake-up of d0's NAPI thread per 256
// frames), the backfill thread and the dispatcher anchor
// (bench/results/notebook-2026-11.md, "The generator").
const fwGenDefault = "256+backfill+anchor"

// fwIdleLimit is the share of a drop run the receiver (d0's NAPI thread)
// may go without frames (with the backfill thread: that thread's run time)
// and still count as saturated: above it the rate is the generator's, not
// the filter's. Busy alone does not tell: other load takes CPU 0 from the
// thread too. Without the backfill thread, fwSleepLimit sleeps a second
// stand in for it.
const (
	fwIdleLimit  = 5.0
	fwSleepLimit = 100.0
)

type fwOptions struct {
	harness.RunFlags               // Duration: each drop run (generator time)
	tcpDur           time.Duration // each iperf3 run
	levels           []int
	variants         []string
	iperf            bool
	progStats        bool    // the filter program's own time per packet (BPF_ENABLE_STATS)
	gens             []fwGen // the generator's settings; more than one: each drop run once per setting, interleaved (an A/B)
	flows            []int   // UDP flows (source ports) per drop run; more than one: each drop run once per count, interleaved
}

// fwSrcPort is the generator's (first) source port; -flows N uses
// fwSrcPort..fwSrcPort+N-1.
const fwSrcPort = 40000

// fwFlowsDefault: one flow (every frame the same 5-tuple: per-flow and
// per-tuple memories in a filter hit on every frame), 256 (the source
// port changes every frame: a one-entry memory of the last flow misses on
// every frame; xlane's conntrack memory has fwMissSlots slots, and 256
// consecutive ports fill them without taking one another's) and 4096
// (sixteen flows per slot: that memory misses on every frame).
const fwFlowsDefault = "1,256,4096"

// fwMissSlots is the slot count of xlane's per-CPU conntrack miss memory
// (bpf/lib/fw_lin.h, FW_MISS_SLOTS).
const fwMissSlots = 256

// parseFWFlows parses a -flows list.
func parseFWFlows(value string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(value, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(item))
		if err != nil || n < 1 || n > 0xffff-fwSrcPort+1 || slices.Contains(out, n) {
			return nil, fmt.Errorf("-flows: %q: want distinct numbers from 1 to %d", item, 0xffff-fwSrcPort+1)
		}
		out = append(out, n)
	}
	return out, nil
}

// fwFlowsOf is the flow count of s (samples from before -flows: 1).
func fwFlowsOf(s fwSample) int { return max(s.Flows, 1) }

// flowCounts is o.flows, or the one flow of options without them.
func (o fwOptions) flowCounts() []int {
	if len(o.flows) == 0 {
		return []int{1}
	}
	return o.flows
}

// fwGen is one setting of the generator (-gen): BATCH[+backfill][+anchor].
type fwGen struct {
	batch    uint32
	backfill bool // rate.Options.Backfill
	anchor   bool // rate.Options.Anchor
}

func (g fwGen) String() string {
	s := strconv.Itoa(int(g.batch))
	if g.backfill {
		s += "+backfill"
	}
	if g.anchor {
		s += "+anchor"
	}
	return s
}

// parseFWGen parses a -gen list.
func parseFWGen(value string) ([]fwGen, error) {
	var out []fwGen
	for _, item := range strings.Split(value, ",") {
		f := strings.Split(strings.TrimSpace(item), "+")
		b, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil || b < 1 || b > gen.MaxBatch {
			return nil, fmt.Errorf("-gen: %q: want a batch from 1 to %d, then +backfill and/or +anchor", item, gen.MaxBatch)
		}
		g := fwGen{batch: uint32(b)}
		for _, opt := range f[1:] {
			switch {
			case opt == "backfill" && !g.backfill:
				g.backfill = true
			case opt == "anchor" && !g.anchor:
				g.anchor = true
			default:
				return nil, fmt.Errorf("-gen: %q: %q: want +backfill and/or +anchor, once each", item, opt)
			}
		}
		if slices.Contains(out, g) {
			return nil, fmt.Errorf("-gen: %q twice", item)
		}
		out = append(out, g)
	}
	return out, nil
}

func parseFWFlags(args []string) (fwOptions, error) {
	var o fwOptions
	fs := flag.NewFlagSet("fw", flag.ContinueOnError)
	var levels, variants, gens, flows string
	o.Register(fs, harness.RunFlagsUsage{
		Quick:           "1 repetition, 1 s drop runs and 2 s iperf3 runs (unless given)",
		Reps:            "repetitions; each runs every variant once, interleaved",
		Duration:        "length of each drop-rate run (generator time)",
		DefaultDuration: 5 * time.Second,
		Out:             "directory for fw-<date>.json and fw-latest.md (\"\": print only)",
		KeepTmp:         "keep the temp dir (binaries, logs, rule files)",
	})
	fs.DurationVar(&o.tcpDur, "tcp-duration", 5*time.Second, "length of each iperf3 run (whole seconds)")
	fs.StringVar(&levels, "levels", "1,1000,10000", "rule counts, in run order")
	fs.StringVar(&variants, "variants", strings.Join(fwVariants, ","), "filters to compare")
	fs.BoolVar(&o.iperf, "iperf", true, "iperf3 throughput of allowed traffic with the largest rule set and with none")
	fs.StringVar(&gens, "gen", fwGenDefault, fmt.Sprintf("the generator: BATCH (frames per flush of BPF_PROG_RUN, 1..%d; the kernel's default is %d), "+
		"+backfill (a second thread on CPU 0 below the receiver's priority), +anchor (the program held in the XDP dispatcher: "+
		"no RCU grace periods per call); a list runs every drop run once per setting, interleaved (an A/B: -gen 64,%s)", gen.MaxBatch, gen.DefaultBatch, fwGenDefault))
	fs.StringVar(&flows, "flows", fwFlowsDefault, fmt.Sprintf("UDP flows per drop run: the source port cycles over %d..%d+N-1, one step per frame; "+
		"a list runs every drop run once per count, interleaved", fwSrcPort, fwSrcPort))
	fs.BoolVar(&o.progStats, "prog-stats", false, "also the XDP filter program's own ns per packet (kernel BPF run statistics, "+
		"on for the run: they add two clock reads to every BPF program run, so rates are lower than without)")
	if err := o.Parse(fs, args, map[string]string{"reps": "1", "duration": "1s", "tcp-duration": "2s"}); err != nil {
		return o, err
	}
	var err error
	if o.levels, err = harness.ParseLevels(levels, 16000, false); err != nil {
		return o, err
	}
	if o.variants, err = harness.ParseChoices("variants", variants, fwVariants); err != nil {
		return o, err
	}
	if o.gens, err = parseFWGen(gens); err != nil {
		return o, err
	}
	if o.flows, err = parseFWFlows(flows); err != nil {
		return o, err
	}
	if o.Reps < 1 || o.Duration < 500*time.Millisecond || o.tcpDur < time.Second {
		return o, errors.New("-reps >= 1, -duration >= 500ms, -tcp-duration >= 1s")
	}
	return o, nil
}

// fwSample is one drop-rate run of one variant.
type fwSample struct {
	Variant     string  `json:"variant"`
	Rules       int     `json:"rules"`
	Rep         int     `json:"rep"`
	Flows       int     `json:"flows"` // UDP source ports, one after another
	Seconds     float64 `json:"seconds"`
	Offered     uint64  `json:"offered"`      // frames the generator sent
	RingFull    uint64  `json:"ring_full"`    // lost before the filter (d0's ring full)
	Dropped     uint64  `json:"dropped"`      // the dropping rule's counter
	DroppedMpps float64 `json:"dropped_mpps"` // Dropped / Seconds
	OfferedMpps float64 `json:"offered_mpps"`
	CPU0BusyPct float64 `json:"cpu0_busy_pct"` // CPU 0 (d0's NAPI) busy
	CPU0SoftPct float64 `json:"cpu0_softirq_pct"`
	NsPerDrop   float64 `json:"cpu_ns_per_drop"` // CPU 0 busy time / Dropped
	// The receiver: d0's NAPI thread (threaded, CPU 0), which does all of
	// the filter's work and nothing else (CPU 0's figures include other
	// load on the machine).
	NAPIBusyPct float64 `json:"napi_busy_pct"` // its run time / Seconds
	NAPIWaitPct float64 `json:"napi_wait_pct"` // runnable, waiting for CPU 0 (other load) / Seconds
	// NAPIIdlePct is the share of the run the receiver had no frames to
	// take (the generator's limit): with the backfill thread, which runs
	// on CPU 0 exactly then, its run time; without, unknown (0): other
	// load also takes CPU 0 from the thread without schedstat counting it
	// as waiting, so the run time alone does not tell.
	NAPIIdlePct   float64 `json:"napi_idle_pct"`
	NAPINsPerDrop float64 `json:"napi_ns_per_drop"` // its run time / Dropped
	NAPISleeps    uint64  `json:"napi_sleeps"`      // times it found d0's ring empty and slept until the generator woke it
	// The generator: its batch (-gen-batch) and its thread's run time.
	GenBatch      uint32  `json:"gen_batch"`
	GenBackfill   bool    `json:"gen_backfill"`
	GenAnchor     bool    `json:"gen_anchor"`
	GenBackfillMs float64 `json:"gen_backfill_ms,omitempty"` // the backfill thread's run time
	GenWaitPct    float64 `json:"gen_wait_pct"`              // the main generator thread runnable, not running / Seconds
	GenBusyPct    float64 `json:"gen_busy_pct"`              // run time / Seconds
	GenNsPerFrame float64 `json:"gen_ns_per_frame"`          // run time / Offered
	// StealPct is the time the hypervisor ran something else on CPUs 0
	// and 1 (/proc/stat steal), a share of both: a slower machine, not a
	// slower filter.
	StealPct float64 `json:"steal_pct"`
	// -prog-stats: the XDP program's run time per run (every run is a
	// frame), apart from the kernel's work around it.
	ProgNsPerPkt float64 `json:"prog_ns_per_pkt,omitempty"`
	Entry        string  `json:"entry"`
}

// fwTCP is one iperf3 run.
type fwTCP struct {
	Variant     string  `json:"variant"`
	Rules       int     `json:"rules"`
	Rep         int     `json:"rep"`
	Gbps        float64 `json:"gbps"`
	Retransmits int64   `json:"retransmits"`
	CPUBusyPct  float64 `json:"cpu_busy_pct"` // all CPUs
}

type fwReport struct {
	harness.RunHeader
	Versions  map[string]string // iptables, nft, iperf3
	LoadTimes map[string]string // "variant N rules" -> time to install
	Samples   []fwSample
	TCP       []fwTCP
	Notes     []string
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	os.Exit(fwMain(os.Args[1:]))
}

func fwMain(args []string) (code int) {
	o, err := parseFWFlags(args)
	if err != nil {
		log.Print(err)
		return 2
	}
	if err := fwPreflight(o); err != nil {
		log.Print(err)
		return 1
	}
	return harness.Main("fw-", o.KeepTmp, func(ctx context.Context, tmp string, cleanup *harness.UndoStack) error {
		rep, err := fwBenchmark(ctx, o, tmp, cleanup)
		if err != nil {
			return err
		}
		j, _ := json.MarshalIndent(rep, "", "  ")
		return harness.PrintResults(o.Out, "fw", rep.Started, fwMarkdown(rep, o), append(j, '\n'))
	})
}

func fwPreflight(o fwOptions) error {
	tools := []string{"go", "ip", "nsenter", "ethtool"}
	for _, v := range o.variants {
		switch v {
		case "iptables":
			tools = append(tools, "iptables-restore", "iptables-save")
		case "nftables":
			tools = append(tools, "nft")
		}
	}
	if o.iperf {
		tools = append(tools, "iperf3")
	}
	return harness.Preflight("network namespaces, BPF", true, tools...)
}

// fwTopo is one variant: a generator namespace and a DUT namespace joined
// by a veth, and the variant's filter on d0.
type fwTopo struct {
	variant  string
	ceiling  *xdpDropAll // the xdp-drop variant's program
	gns, dns string
	gmac     net.HardwareAddr
	dmac     net.HardwareAddr
	dir      string // logs, rule files, xlaned's state
	bins     string
	pinDir   string
	daemon   *harness.Proc
	undo     harness.UndoStack
	entry    string
}

func (t *fwTopo) xlane() bool { return strings.HasPrefix(t.variant, "xlane-") }

func (t *fwTopo) cli(ctx context.Context, args ...string) (string, error) {
	return harness.Xlane(ctx, t.bins, t.dir, args...)
}

func (t *fwTopo) Setup(ctx context.Context) error {
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return err
	}
	if err := harness.AddNamespaces(ctx, &t.undo, t.gns, t.dns); err != nil {
		return err
	}
	err := harness.RunAll(ctx,
		[]string{"ip", "-n", t.gns, "link", "add", "g0", "type", "veth", "peer", "name", "d0", "netns", t.dns},
		[]string{"ip", "-n", t.gns, "addr", "add", fwGenAddr.String() + "/24", "dev", "g0"},
		[]string{"ip", "-n", t.dns, "addr", "add", fwDUTAddr.String() + "/24", "dev", "d0"},
		[]string{"ip", "-n", t.gns, "link", "set", "g0", "up"},
		[]string{"ip", "-n", t.dns, "link", "set", "d0", "up"},
	)
	if err != nil {
		return err
	}
	if t.gmac, err = harness.LinkMAC(ctx, t.gns, "g0"); err != nil {
		return err
	}
	if t.dmac, err = harness.LinkMAC(ctx, t.dns, "d0"); err != nil {
		return err
	}
	if isCeiling(t.variant) {
		x, err := attachXDPDropAll(t.dns, "d0", t.variant == fwCeilingRead)
		if err != nil {
			return err
		}
		t.ceiling = x
		t.undo.Push("detach xdp-drop", func(context.Context) error { return x.Close() })
		return nil
	}
	if !t.xlane() {
		return nil
	}
	mode := strings.TrimSuffix(strings.TrimPrefix(t.variant, "xlane-"), fwStateless)
	t.daemon, err = harness.StartXlaned(ctx, &t.undo, harness.Xlaned{
		Name: "xlaned " + t.variant, Netns: t.dns, Bins: t.bins, Dir: t.dir, PinDir: t.pinDir,
		Args:    []string{"--docker-plugin-socket=", "--uplink", "d0", "--uplink-xdp-mode", mode},
		Timeout: 60 * time.Second, // loading and verifying every program: seconds, more on a loaded machine
	})
	if err != nil {
		return err
	}
	out, err := t.cli(ctx, "-o", "json", "status")
	if err != nil {
		return err
	}
	var st api.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return fmt.Errorf("xlane status: %w", err)
	}
	if st.UplinkXDPMode != mode {
		return fmt.Errorf("xlaned %s: uplink XDP mode %q, want %q", t.variant, st.UplinkXDPMode, mode)
	}
	return nil
}

func (t *fwTopo) Teardown() error { return t.undo.Run() }

// fwRuleSrc is the source address of non-matching rule i (1-based).
func fwRuleSrc(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// Load replaces the variant's rules with n (0: none).
func (t *fwTopo) Load(ctx context.Context, n int) error {
	var b strings.Builder
	switch {
	case isCeiling(t.variant):
		return nil // no rules: it drops everything
	case t.xlane():
		if strings.HasSuffix(t.variant, fwStateless) {
			b.WriteString("established: false\n")
		}
		b.WriteString("rules:")
		if n == 0 {
			b.WriteString(" []\n")
		} else {
			b.WriteString("\n")
		}
		for i := 1; i < n; i++ {
			fmt.Fprintf(&b, "  - {name: r%d, scope: uplink, proto: udp, src: %s/32, dport: %d, action: drop}\n", i, fwRuleSrc(i), fwDropPort)
		}
		if n > 0 {
			fmt.Fprintf(&b, "  - {name: drop-gen, scope: uplink, proto: udp, src: %s/32, dport: %d, action: drop}\n", fwGenAddr, fwDropPort)
		}
		path := filepath.Join(t.dir, fmt.Sprintf("rules-%d.yaml", n))
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			return err
		}
		_, err := t.cli(ctx, "fw", "apply", path)
		return err
	case t.variant == "iptables":
		b.WriteString("*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
		for i := 1; i < n; i++ {
			fmt.Fprintf(&b, "-A PREROUTING -s %s/32 -p udp -m udp --dport %d -j DROP\n", fwRuleSrc(i), fwDropPort)
		}
		if n > 0 {
			fmt.Fprintf(&b, "-A PREROUTING -s %s/32 -p udp -m udp --dport %d -j DROP\n", fwGenAddr, fwDropPort)
		}
		b.WriteString("COMMIT\n")
		_, err := harness.RunInput(ctx, b.String(), harness.NSExec(t.dns, "iptables-restore")...)
		return err
	default: // nftables
		b.WriteString("table netdev xlbfw\ndelete table netdev xlbfw\n")
		if n > 0 {
			b.WriteString("table netdev xlbfw {\n  chain in {\n    type filter hook ingress device \"d0\" priority -500; policy accept;\n")
			for i := 1; i < n; i++ {
				fmt.Fprintf(&b, "    ip saddr %s udp dport %d drop\n", fwRuleSrc(i), fwDropPort)
			}
			fmt.Fprintf(&b, "    ip saddr %s udp dport %d counter drop\n  }\n}\n", fwGenAddr, fwDropPort)
		}
		_, err := harness.RunInput(ctx, b.String(), harness.NSExec(t.dns, "nft", "-f", "-")...)
		return err
	}
}

var nftCounterRE = regexp.MustCompile(`counter packets (\d+) bytes`)

// Dropped reads the dropping rule's packet counter.
func (t *fwTopo) Dropped(ctx context.Context) (uint64, error) {
	switch {
	case isCeiling(t.variant):
		return t.ceiling.Dropped()
	case t.xlane():
		out, err := t.cli(ctx, "-o", "json", "fw", "ls")
		if err != nil {
			return 0, err
		}
		var fw api.Firewall
		if err := json.Unmarshal([]byte(out), &fw); err != nil {
			return 0, fmt.Errorf("xlane fw ls: %w", err)
		}
		for _, r := range fw.Rules {
			if r.Name == "drop-gen" {
				return r.Packets, nil
			}
		}
		return 0, errors.New("xlane fw ls: no rule drop-gen")
	case t.variant == "iptables":
		out, err := harness.Run(ctx, harness.NSExec(t.dns, "iptables-save", "-c", "-t", "raw")...)
		if err != nil {
			return 0, err
		}
		rules, err := measure.ParseIptablesSave(out)
		if err != nil {
			return 0, err
		}
		for _, r := range rules {
			if strings.Contains(r.Rule, fwGenAddr.String()+"/32") {
				return r.Packets, nil
			}
		}
		return 0, errors.New("iptables-save: no rule for the generator's source")
	default:
		out, err := harness.Run(ctx, harness.NSExec(t.dns, "nft", "list", "chain", "netdev", "xlbfw", "in")...)
		if err != nil {
			return 0, err
		}
		m := nftCounterRE.FindStringSubmatch(out)
		if m == nil {
			return 0, errors.New("nft: no counter in chain netdev xlbfw in")
		}
		return strconv.ParseUint(m[1], 10, 64)
	}
}

// cpuTimes is one CPU's line of /proc/stat.
type cpuTimes struct{ busy, softirq, steal, total uint64 }

func readCPUN(cpu int) (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	name := fmt.Sprintf("cpu%d", cpu)
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || f[0] != name {
			continue
		}
		var t cpuTimes
		for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
			n, _ := strconv.ParseUint(v, 10, 64)
			t.total += n
			if i != 3 && i != 4 {
				t.busy += n
			}
			switch i {
			case 6:
				t.softirq = n
			case 7:
				t.steal = n
			}
		}
		return t, nil
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat: no %s line", name)
}

// dropRun measures the drop rate of t's filter for d.
func (t *fwTopo) dropRun(ctx context.Context, n, rep int, d time.Duration, g fwGen, flows int, progStats bool) (fwSample, error) {
	s := fwSample{Variant: t.variant, Rules: n, Rep: rep, Flows: flows, GenBatch: g.batch, GenBackfill: g.backfill, GenAnchor: g.anchor}
	var undo harness.UndoStack
	defer func() {
		if err := undo.Run(); err != nil {
			log.Printf("fw %s: restore: %v", t.variant, err)
		}
	}()
	entry, err := rate.PrepareEntry(ctx, harness.Pair{Node: t.dns, ClientHostIf: "d0"}, gen.Frames, &undo)
	if err != nil {
		return s, err
	}
	s.Entry = entry.Desc
	objs, err := gen.Load(gen.Flow{DstMAC: t.dmac, SrcMAC: t.gmac, Src: fwGenAddr, Dst: fwDUTAddr,
		SrcPort: fwSrcPort, DstPort: fwDropPort, TTL: 64, Flows: uint16(flows)}, gen.Frames)
	if err != nil {
		return s, err
	}
	undo.Push("close generator objects", func(context.Context) error { return objs.Close() })
	tps, err := objs.AttachTracepoints()
	if err != nil {
		return s, err
	}
	defer func() {
		for _, l := range tps {
			l.Close()
		}
	}()
	d0, err := t.Dropped(ctx)
	if err != nil {
		return s, err
	}
	var prog *ebpf.Program // -prog-stats: d0's XDP program (none for iptables, nftables)
	var st0 *ebpf.ProgramStats
	if progStats {
		if prog, err = xdpProgram(t.dns, "d0"); err != nil {
			return s, err
		}
		if prog != nil {
			defer prog.Close()
			if st0, err = prog.Stats(); err != nil {
				return s, err
			}
		}
	}
	c0, err := readCPUN(rate.NAPICPU)
	if err != nil {
		return s, err
	}
	g0, err := readCPUN(rate.GenCPU)
	if err != nil {
		return s, err
	}
	var napi0, napi1 rate.ThreadTimes
	if entry.NAPIThread != 0 {
		if napi0, err = rate.ReadThread(entry.NAPIThread); err != nil {
			return s, err
		}
	}
	run, err := rate.Generate(ctx, objs, harness.Pair{Client: t.gns, ClientIf: "g0"}, d, rate.Options{Batch: g.batch, Backfill: g.backfill, Anchor: g.anchor})
	if err != nil {
		return s, err
	}
	if entry.NAPIThread != 0 {
		if napi1, err = rate.ReadThread(entry.NAPIThread); err != nil {
			return s, err
		}
	}
	if prog != nil {
		st1, err := prog.Stats()
		if err != nil {
			return s, err
		}
		if runs := st1.RunCount - st0.RunCount; runs > 0 {
			s.ProgNsPerPkt = float64((st1.Runtime - st0.Runtime).Nanoseconds()) / float64(runs)
		}
	}
	c1, err := readCPUN(rate.NAPICPU)
	if err != nil {
		return s, err
	}
	g1, err := readCPUN(rate.GenCPU)
	if err != nil {
		return s, err
	}
	time.Sleep(100 * time.Millisecond) // frames still in the ring
	d1, err := t.Dropped(ctx)
	if err != nil {
		return s, err
	}
	c, err := objs.Counters()
	if err != nil {
		return s, err
	}
	errs, err := objs.XDPErrors()
	if err != nil {
		return s, err
	}
	for _, e := range errs {
		if e.Event == "devmap_xmit_drop" {
			s.RingFull += e.Frames
		}
	}
	s.Seconds = run.Elapsed.Seconds()
	s.Offered, s.Dropped = c.Offered, d1-d0
	if s.Offered == 0 {
		return s, errors.New("the generator sent nothing")
	}
	if s.Dropped == 0 {
		return s, fmt.Errorf("the filter dropped none of %d frames (ring full: %d)", s.Offered, s.RingFull)
	}
	s.DroppedMpps = float64(s.Dropped) / s.Seconds / 1e6
	s.OfferedMpps = float64(s.Offered) / s.Seconds / 1e6
	if tot := c1.total - c0.total; tot > 0 {
		s.CPU0BusyPct = 100 * float64(c1.busy-c0.busy) / float64(tot)
		s.CPU0SoftPct = 100 * float64(c1.softirq-c0.softirq) / float64(tot)
		s.NsPerDrop = float64(c1.busy-c0.busy) * 1e9 / 100 / float64(s.Dropped) // USER_HZ 100
	}
	if tot := c1.total - c0.total + g1.total - g0.total; tot > 0 {
		s.StealPct = 100 * float64(c1.steal-c0.steal+g1.steal-g0.steal) / float64(tot)
	}
	if entry.NAPIThread != 0 {
		busy, wait := napi1.Run-napi0.Run, napi1.Wait-napi0.Wait
		s.NAPIBusyPct = 100 * busy.Seconds() / s.Seconds
		s.NAPIWaitPct = 100 * wait.Seconds() / s.Seconds
		if g.backfill {
			s.NAPIIdlePct = 100 * run.Backfill.Seconds() / s.Seconds
		}
		s.NAPINsPerDrop = float64(busy.Nanoseconds()) / float64(s.Dropped)
		s.NAPISleeps = napi1.Sleeps - napi0.Sleeps
	}
	s.GenBusyPct = 100 * run.CPU.Seconds() / s.Seconds
	s.GenWaitPct = 100 * run.Wait.Seconds() / s.Seconds
	s.GenBackfillMs = float64(run.Backfill.Microseconds()) / 1000
	s.GenNsPerFrame = float64(run.CPU.Nanoseconds()) / float64(s.Offered)
	return s, nil
}

// tcpRun is iperf3 from gen to dut for d.
func (t *fwTopo) tcpRun(ctx context.Context, n, rep int, d time.Duration) (fwTCP, error) {
	r := fwTCP{Variant: t.variant, Rules: n, Rep: rep}
	a, err := measure.ReadCPU()
	if err != nil {
		return r, err
	}
	out, err := harness.Run(ctx, harness.NSExec(t.gns, "iperf3", "-c", fwDUTAddr.String(), "-t", strconv.Itoa(int(d.Seconds())), "-J")...)
	if err != nil {
		return r, err
	}
	b, err := measure.ReadCPU()
	if err != nil {
		return r, err
	}
	res, err := measure.ParseIperf3([]byte(out))
	if err != nil {
		return r, err
	}
	r.Gbps, r.Retransmits, r.CPUBusyPct = res.ReceivedBps/1e9, res.Retransmits, 100*measure.BusyFraction(a, b)
	return r, nil
}

func fwBenchmark(ctx context.Context, o fwOptions, tmp string, cleanup *harness.UndoStack) (*fwReport, error) {
	m := harness.DescribeMachine(ctx)
	rep := &fwReport{RunHeader: harness.RunHeader{Started: time.Now(), Kernel: m.Kernel, CPU: m.CPUModel, NProc: m.NProc,
		LoadStart: m.LoadStart, GitCommit: m.GitCommit,
		Options: map[string]string{
			"duration": o.Duration.String(), "tcp-duration": o.tcpDur.String(), "reps": strconv.Itoa(o.Reps),
			"levels": fmt.Sprint(o.levels), "variants": strings.Join(o.variants, ","), "iperf": strconv.FormatBool(o.iperf),
			"order": "per repetition, per rule count (loaded anew, the first count rotating with the repetition): " + strings.Join(o.variants, ", ") + " (interleaved)" +
				map[bool]string{true: ", each once per generator setting", false: ""}[len(o.gens) > 1] +
				map[bool]string{true: ", each once per flow count", false: ""}[len(o.flows) > 1],
			"generator": fmt.Sprint(o.gens),
			"flows":     fmt.Sprint(o.flows),
		}},
		Versions: map[string]string{}, LoadTimes: map[string]string{}}
	for name, argv := range map[string][]string{"iptables": {"iptables", "-V"}, "nft": {"nft", "-v"}, "iperf3": {"iperf3", "--version"}} {
		if out, err := harness.Run(ctx, argv...); err == nil {
			l, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
			rep.Versions[name] = l
		}
	}
	bins, runID, err := harness.PrepareRun(ctx, tmp, "fw*")
	if err != nil {
		return nil, err
	}
	if o.progStats {
		c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			return nil, fmt.Errorf("-prog-stats: BPF_ENABLE_STATS: %w", err)
		}
		cleanup.Push("BPF run statistics off", func(context.Context) error { return c.Close() })
	}
	var topos []*fwTopo
	for i, v := range o.variants {
		t := &fwTopo{variant: v, gns: fmt.Sprintf("%s-fw%d-gen", runID, i), dns: fmt.Sprintf("%s-fw%d-dut", runID, i),
			dir: filepath.Join(tmp, v), bins: bins, pinDir: fmt.Sprintf("/sys/fs/bpf/%s-fw%d", runID, i)}
		cleanup.Push("tear down "+v, func(context.Context) error { return t.Teardown() })
		log.Printf("setup %s", v)
		if err := t.Setup(ctx); err != nil {
			return nil, fmt.Errorf("setup %s: %w", v, err)
		}
		topos = append(topos, t)
	}
	load := func(n int) error {
		for _, t := range topos {
			start := time.Now()
			if err := t.Load(ctx, n); err != nil {
				return fmt.Errorf("%s: load %d rules: %w", t.variant, n, err)
			}
			took := time.Since(start).Round(time.Millisecond)
			rep.LoadTimes[fmt.Sprintf("%s %d rules", t.variant, n)] = took.String()
			log.Printf("%-13s %5d rules loaded in %v", t.variant, n, took)
		}
		return nil
	}
	total, k := len(o.levels)*o.Reps*len(topos)*len(o.gens)*len(o.flows), 0
	// Per repetition, every rule count (loaded anew), in an order that
	// rotates with the repetition (fwLevelOrder): drift of the machine
	// over the run hits every count alike, not one block of it.
	loaded := -1
	for r := 1; r <= o.Reps; r++ {
		for _, n := range fwLevelOrder(o.levels, r) {
			if n != loaded {
				if err := load(n); err != nil {
					return nil, err
				}
				loaded = n
			}
			for _, t := range topos {
				for _, g := range o.gens {
					for _, fl := range o.flows {
						k++
						s, err := t.dropRun(ctx, n, r, o.Duration, g, fl, o.progStats)
						if err != nil {
							return nil, fmt.Errorf("%s %d rules %d flows (rep %d, generator %s): %w", t.variant, n, fl, r, g, err)
						}
						rep.Samples = append(rep.Samples, s)
						log.Printf("[%d/%d] %5d rules %3d flows rep %d %-13s %s: dropped %.3f Mpps of %.3f offered (ring full %d); "+
							"receiver %.0f%% busy, %.0f%% waiting for the CPU, %.0f%% idle, %.0f ns/drop, %d sleeps; generator %.0f%% busy, %.0f ns/frame; "+
							"cpu0 %.0f%% busy; steal %.1f%%; program %.0f ns/pkt",
							k, total, n, fl, r, t.variant, g, s.DroppedMpps, s.OfferedMpps, s.RingFull,
							s.NAPIBusyPct, s.NAPIWaitPct, s.NAPIIdlePct, s.NAPINsPerDrop, s.NAPISleeps, s.GenBusyPct, s.GenNsPerFrame,
							s.CPU0BusyPct, s.StealPct, s.ProgNsPerPkt)
					}
				}
			}
		}
	}
	if o.iperf {
		big := slices.Max(o.levels)
		var tcpTopos []*fwTopo // the ceiling drops everything: no TCP through it
		for _, t := range topos {
			if !isCeiling(t.variant) {
				tcpTopos = append(tcpTopos, t)
			}
		}
		for _, t := range tcpTopos {
			p, err := harness.StartProc("iperf3 server "+t.variant, filepath.Join(t.dir, "iperf3.log"),
				harness.NSExec(t.dns, "iperf3", "-s", "-B", fwDUTAddr.String())...)
			if err != nil {
				return nil, err
			}
			t.undo.Push("stop "+p.Name, p.Stop)
			err = harness.WaitFor(ctx, p.Name, 5*time.Second, p, func() bool {
				return harness.Listening(ctx, t.dns, netip.AddrPortFrom(fwDUTAddr, 5201))
			})
			if err != nil {
				return nil, err
			}
		}
		// Interleaved: every repetition runs both sets, in turn first
		// (the largest set first in odd ones), so drift in the machine's
		// load hits both alike.
		for r := 1; r <= o.Reps; r++ {
			for _, n := range fwTCPOrder(big, r) {
				if n != loaded {
					if err := load(n); err != nil {
						return nil, err
					}
					loaded = n
				}
				for _, t := range tcpTopos {
					res, err := t.tcpRun(ctx, n, r, o.tcpDur)
					if err != nil {
						return nil, fmt.Errorf("iperf3 %s %d rules (rep %d): %w", t.variant, n, r, err)
					}
					rep.TCP = append(rep.TCP, res)
					log.Printf("iperf3 %5d rules rep %d %-13s %.2f Gbit/s, cpu %.0f%%, retr %d", n, r, t.variant, res.Gbps, res.CPUBusyPct, res.Retransmits)
				}
			}
		}
	}
	rep.Notes = append(rep.Notes,
		"xlane-native's TCP throughput is that of a veth with a native XDP program, with or without rules: "+
			"attaching it turns TSO off on the peer g0 (even for xdp.frags programs) and d0 takes every skb as an xdp_buff; "+
			"a NIC does not have this cost. Compare each variant's rules/no-rules ratio.",
		"The same rule set shape for all: N-1 rules 'udp from 10.a.b.c/32 to port 9: drop' that do not match, then the generator's source; "+
			"xlane's rules are uplink-scope (established: true, its default: a packet a rule matched is looked up in conntrack first; "+
			"xlane-native-stateless: established: false, as iptables' raw table and nftables' netdev chain, which see no conntrack), "+
			"iptables' in raw PREROUTING, nftables' in a netdev ingress chain on d0 "+
			"(only the last rule has a counter there; iptables and xlane count every rule).")
	rep.LoadEnd = harness.LoadAvg()
	if load1, _, _ := strings.Cut(rep.LoadStart, " "); measure.ParseFloat(load1) > 0.5*float64(runtime.NumCPU()) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("machine: loadavg was %s at the start and %s at the end (%d CPUs): other load ran alongside; expect noise",
			rep.LoadStart, rep.LoadEnd, runtime.NumCPU()))
	}
	for _, t := range topos {
		if t.xlane() && t.daemon != nil {
			if out, err := t.cli(ctx, "fw", "ls"); err == nil && harness.Verbose {
				log.Printf("%s fw ls:\n%s", t.variant, out)
			}
		}
	}
	rep.Finished = time.Now()
	return rep, nil
}

// fwTargets is issue 14 §1's targets against the samples of one run (one
// generator batch), per xlane native variant, at the smallest and the
// largest rule count, per flow count (each against the others at the same
// flow count): the drop rate at least half the bare drop's (xdp-drop), 4x
// iptables raw, 3x nftables netdev.
func fwTargets(ss []fwSample, o fwOptions) string {
	drop := func(s fwSample) float64 { return s.DroppedMpps }
	var b strings.Builder
	flows := o.flowCounts()
	levels := []int{o.levels[0]}
	if hi := slices.Max(o.levels); hi != levels[0] {
		levels = append(levels, hi)
	}
	for _, v := range o.variants {
		if !strings.HasPrefix(v, "xlane-native") {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nTargets (issue 14 §1; ratios of medians, this run, each against the others at the same flow count):\n\n" +
				"| variant | rules | flows | vs xdp-drop ≥ 0.5 | vs iptables ≥ 4 | vs nftables ≥ 3 |\n|---|---:|---|---|---|---|\n")
		}
		for _, n := range levels {
			for _, fl := range flows {
				fs := fwFlowSamples(ss, fl)
				dm := fwMedian(fs, v, n, drop)
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", v, n, fwFlowLabel(fl, len(flows) > 1),
					fwVerdict(measure.Ratio(dm, fwMedian(fs, fwCeiling, n, drop)), 0.5),
					fwVerdict(measure.Ratio(dm, fwMedian(fs, "iptables", n, drop)), 4),
					fwVerdict(measure.Ratio(dm, fwMedian(fs, "nftables", n, drop)), 3))
			}
		}
	}
	if b.Len() > 0 && len(flows) > 1 {
		b.WriteString("\n" + fwFlowsNote + "\n")
	}
	return b.String()
}

// fwTCPTargets is issue 14 §1's TCP target: allowed TCP through the largest
// rule set at least 0.9x no rules, per xlane native variant.
func fwTCPTargets(rep *fwReport, o fwOptions) string {
	if len(rep.TCP) == 0 {
		return ""
	}
	var b strings.Builder
	hi := slices.Max(o.levels)
	for _, v := range o.variants {
		if !strings.HasPrefix(v, "xlane-native") {
			continue
		}
		var a, c []float64
		for _, r := range rep.TCP {
			if r.Variant == v && r.Rules == 0 {
				a = append(a, r.Gbps)
			} else if r.Variant == v && r.Rules == hi {
				c = append(c, r.Gbps)
			}
		}
		fmt.Fprintf(&b, "\n%s allowed TCP through %d rules vs none ≥ 0.9: %s", v, hi,
			fwVerdict(measure.Ratio(measure.Median(c), measure.Median(a)), 0.9))
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

func fwVerdict(r, min float64) string {
	switch {
	case r != r:
		return "–"
	case r >= min:
		return fmt.Sprintf("%.2f met", r)
	}
	return fmt.Sprintf("%.2f **missed**", r)
}

// fwMedian is the median of metric over the samples of variant at n rules.
func fwMedian(ss []fwSample, variant string, n int, metric func(fwSample) float64) float64 {
	var xs []float64
	for _, s := range ss {
		if s.Variant == variant && s.Rules == n {
			xs = append(xs, metric(s))
		}
	}
	return measure.Median(xs)
}

// fwFlowsNote says what the flow counts mean for xlane's firewall.
const fwFlowsNote = "Flows: 1 = every frame the same 5-tuple, so xlane's per-CPU memories (the flows with no conntrack entry, 256 slots; " +
	"the last rule tuple's answer, keyed by protocol, source address and destination port) hit on every frame: their best case. " +
	"More = the source port changes every frame: up to 256 consecutive ports each keep a slot of the conntrack miss memory " +
	"(it hits on every frame after the first round); beyond 256 flows share slots, so the remembered miss misses on every frame " +
	"and the lookup is paid plus a compare and a store: its worst case (for xlane-native; -stateless does no conntrack lookup). " +
	"The tuple memory still hits here (same source address, same port 9): a flood from many source addresses would miss it too " +
	"(not measured by this bench: the dropping rule is a /32; docs/firewall.md has BPF_PROG_RUN figures)."

// fwLevelOrder is the order of the rule counts in drop repetition r
// (from 1): levels rotated left by r-1, so each count comes first in turn.
func fwLevelOrder(levels []int, r int) []int {
	i := (r - 1) % len(levels)
	return append(slices.Clone(levels[i:]), levels[:i]...)
}

// fwTCPOrder is the order of the rule counts in iperf3 repetition r:
// the largest set (big) and none, each first in every other repetition.
func fwTCPOrder(big, r int) []int {
	if r%2 == 1 {
		return []int{big, 0}
	}
	return []int{0, big}
}

// fwFlowLabel names flow count n in a table ("1 (best case)").
func fwFlowLabel(n int, several bool) string {
	switch {
	case !several:
		return strconv.Itoa(n)
	case n == 1:
		return "1 (memories' best case)"
	case n <= fwMissSlots:
		return fmt.Sprintf("%d (within the conntrack memory's %d slots)", n, fwMissSlots)
	}
	return fmt.Sprintf("%d (conntrack memory's worst case)", n)
}

// fwFlowSamples are the samples of flow count n.
func fwFlowSamples(ss []fwSample, n int) []fwSample {
	var out []fwSample
	for _, s := range ss {
		if fwFlowsOf(s) == n {
			out = append(out, s)
		}
	}
	return out
}

// fwGenSamples are the samples of generator setting g (all of them when
// the run had one).
func fwGenSamples(ss []fwSample, o fwOptions, g fwGen) []fwSample {
	if len(o.gens) < 2 {
		return ss
	}
	var out []fwSample
	for _, s := range ss {
		if s.GenBatch == g.batch && s.GenBackfill == g.backfill && s.GenAnchor == g.anchor {
			out = append(out, s)
		}
	}
	return out
}

func fwMarkdown(rep *fwReport, o fwOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Firewall drop rate (`go run ./bench/fw`)\n\n")
	fmt.Fprintf(&b, "%s; kernel %s, %d CPUs (%s); commit %s; loadavg %s at start, %s at end.\n",
		rep.Started.UTC().Format(time.RFC3339), rep.Kernel, rep.NProc, rep.CPU, rep.GitCommit, rep.LoadStart, rep.LoadEnd)
	fmt.Fprintf(&b, "%d repetitions of %s per variant and rule count, variants interleaved; %s; %s.\n\n",
		o.Reps, o.Duration, rep.Versions["iptables"], rep.Versions["nft"])
	fmt.Fprintf(&b, "64-byte UDP frames from one source address to port 9 from the bench/gen live-frames generator (XDP_TX, CPU 1; -gen %s) "+
		"into a veth whose far side (d0's NAPI thread, CPU 0, the receiver) carries the filter: N-1 non-matching rules, then the dropping one. "+
		"Flows (-flows %s): 1 = one source port; N = the source port cycles over N values, one step per frame "+
		"(consecutive frames are different flows); every variant is measured at each flow count, interleaved. "+
		"Dropped = that rule's counter; ratios are medians of the same run. Receiver: d0's NAPI thread (schedstat): its share of the run "+
		"on CPU 0 (busy), how long it had no frames (idle: the backfill thread's run time) or how often it ran dry (sleeps/s, without backfill), "+
		"and its run time per drop; ‡: the rate is the generator's, not the filter's. Generator: its threads' run time per frame offered.\n",
		strings.Trim(strings.ReplaceAll(fmt.Sprint(o.gens), " ", ","), "[]"),
		strings.Trim(strings.ReplaceAll(fmt.Sprint(o.flowCounts()), " ", ","), "[]"))
	gens := o.gens
	if len(gens) < 2 {
		gens = []fwGen{{}}
	}
	for _, g := range gens {
		ss := fwGenSamples(rep.Samples, o, g)
		if len(o.gens) > 1 {
			fmt.Fprintf(&b, "\n### Generator %s\n", g)
		}
		for _, fl := range o.flowCounts() {
			if len(o.flowCounts()) > 1 {
				if fl == 1 {
					fmt.Fprintf(&b, "\n#### 1 flow (source port %d)\n", fwSrcPort)
				} else {
					fmt.Fprintf(&b, "\n#### %d flows (source ports %d–%d, one after another)\n", fl, fwSrcPort, fwSrcPort+fl-1)
				}
			}
			b.WriteString(fwDropTable(fwFlowSamples(ss, fl), o))
		}
		b.WriteString(fwTargets(ss, o))
	}
	if len(rep.TCP) > 0 {
		fmt.Fprintf(&b, "\niperf3 TCP, gen -> dut (allowed: no rule matches), %s per run, medians:\n\n| variant | no rules Gbit/s | %d rules Gbit/s | ratio |\n|---|---:|---:|---:|\n", o.tcpDur, slices.Max(o.levels))
		med := func(v string, n int) float64 {
			var xs []float64
			for _, r := range rep.TCP {
				if r.Variant == v && r.Rules == n {
					xs = append(xs, r.Gbps)
				}
			}
			return measure.Median(xs)
		}
		for _, v := range o.variants {
			if isCeiling(v) {
				continue
			}
			a, c := med(v, 0), med(v, slices.Max(o.levels))
			fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f |\n", v, a, c, measure.Ratio(c, a))
		}
	}
	b.WriteString(fwTCPTargets(rep, o))
	b.WriteString("\nHow d0 took the frames in:\n")
	for _, v := range o.variants {
		for _, s := range rep.Samples {
			if s.Variant == v {
				fmt.Fprintf(&b, "- %s: %s\n", v, s.Entry)
				break
			}
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	b.WriteString("\n")
	return b.String()
}

// fwDropTable is the drop-rate table of the samples of one generator
// batch, and the largest rule count against the smallest.
func fwDropTable(ss []fwSample, o fwOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| rules | variant | dropped Mpps | offered Mpps | receiver busy | receiver ns / drop | vs iptables | vs nftables | vs xdp-drop | ring full | generator ns / frame | program ns / pkt |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	drop := func(s fwSample) float64 { return s.DroppedMpps }
	med := func(v string, n int, metric func(fwSample) float64) float64 { return fwMedian(ss, v, n, metric) }
	idle := false
	for _, n := range o.levels {
		ipt := med("iptables", n, drop)
		nft := med("nftables", n, drop)
		bare := med(fwCeiling, n, drop)
		for _, v := range o.variants {
			dm := med(v, n, drop)
			ratio := func(base float64) string {
				if v == "iptables" && base == ipt || v == "nftables" && base == nft || v == fwCeiling && base == bare {
					return "1"
				}
				if r := measure.Ratio(dm, base); r == r {
					return fmt.Sprintf("%.2f×", r)
				}
				return "–"
			}
			orNone := func(x float64, format string) string {
				if x > 0 {
					return fmt.Sprintf(format, x)
				}
				return "–"
			}
			busy := med(v, n, func(s fwSample) float64 { return s.NAPIBusyPct })
			idlePct := med(v, n, func(s fwSample) float64 { return s.NAPIIdlePct })
			sleeps := med(v, n, func(s fwSample) float64 { return float64(s.NAPISleeps) / max(s.Seconds, 1e-9) })
			backfill := len(ss) > 0 && ss[0].GenBackfill
			mark, receiver := "", "–"
			switch {
			case busy > 0 && backfill:
				receiver = fmt.Sprintf("%.0f %%, idle %.0f %%", busy, idlePct)
			case busy > 0:
				receiver = fmt.Sprintf("%.0f %%, %.0f sleeps/s", busy, sleeps)
			}
			if busy > 0 && (backfill && idlePct > fwIdleLimit || !backfill && sleeps > fwSleepLimit) {
				mark, idle = " ‡", true
			}
			fmt.Fprintf(&b, "| %d | %s | %.3f%s | %.3f | %s | %s | %s | %s | %s | %.0f %% | %s | %s |\n", n, v, dm, mark,
				med(v, n, func(s fwSample) float64 { return s.OfferedMpps }),
				receiver,
				orNone(med(v, n, func(s fwSample) float64 { return s.NAPINsPerDrop }), "%.0f"),
				ratio(ipt), ratio(nft), ratio(bare),
				med(v, n, func(s fwSample) float64 { return 100 * float64(s.RingFull) / float64(max(s.Offered, 1)) }),
				orNone(med(v, n, func(s fwSample) float64 { return s.GenNsPerFrame }), "%.0f"),
				orNone(med(v, n, func(s fwSample) float64 { return s.ProgNsPerPkt }), "%.0f"))
		}
	}
	if idle {
		fmt.Fprintf(&b, "\n‡ The receiver ran out of frames (idle above %.0f %% of the run; without the backfill thread: more than %.0f sleeps a second): "+
			"this rate is what the generator delivered, not the filter's capacity (roughly 1000 / receiver ns per drop Mpps).\n", fwIdleLimit, fwSleepLimit)
	}
	var steal []float64
	for _, s := range ss {
		steal = append(steal, s.StealPct)
	}
	if st := slices.Max(append(steal, 0)); st >= 1 {
		fmt.Fprintf(&b, "\nHypervisor steal on CPUs 0 and 1 during the drop runs: median %.1f %%, at most %.1f %% (the machine, not the filter, was slower).\n",
			measure.Median(steal), st)
	}
	if len(o.levels) > 1 {
		lo, hi := o.levels[0], slices.Max(o.levels)
		fmt.Fprintf(&b, "\n%d rules vs %d: ", hi, lo)
		var parts []string
		for _, v := range o.variants {
			parts = append(parts, fmt.Sprintf("%s %.2f", v, measure.Ratio(med(v, hi, drop), med(v, lo, drop))))
		}
		b.WriteString(strings.Join(parts, ", ") + " (drop rate ratio; 1 = no slowdown).\n")
	}
	return b.String()
}
