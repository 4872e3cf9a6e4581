package main

// The small-packet rate tests: 64-byte UDP packets from a BPF_PROG_RUN
// live-frames generator in the client container, counted (and dropped) by
// a tcx program on the server container's eth0. See bench/gen.
//
//	client netns           node netns                              server netns
//	gen --> eth0 ==veth== host veth A --datapath--> host veth B ==veth== eth0 --> count, drop
//	CPU 1                 CPU 0 (SCHED_FIFO)
//
// Two sources:
//   - xdp-frame: the generator's XDP_TX is ndo_xdp_xmit on the client's
//     eth0: xdp_frames go into the host veth's NAPI ring. That veth needs
//     NAPI: native XDP has it; elsewhere GRO is switched on for the run
//     (so those modes build the skb and pay a GRO pass on the host veth).
//     Native XDP sees frames without ever converting an skb: the best
//     case for it, not what a container sends.
//   - skb: the generator's XDP_PASS makes skbs received on the client's
//     eth0, and a tcx program there sends them out of eth0, so the host
//     veth gets skbs as from a socket (native XDP converts, and copies,
//     them into xdp_buffs as it would for real traffic).
//
// The datapath gets CPU 0 and the generator CPU 1, so the generator can
// outrun the datapath: the forwarded rate is one core's worth, and what
// does not fit is dropped at the entry queue. Where the host veth has NAPI
// (native XDP, or GRO for the frame source), that NAPI runs threaded,
// pinned to CPU 0, SCHED_FIFO; otherwise (skb source) RPS steers the host
// veth's backlog to CPU 0 and ksoftirqd/0 runs SCHED_FIFO for the run,
// so that other load on the machine does not take the datapath's CPU.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/bench/internal/rate"
)

// rateDstPort is the UDP port of the generated frames (discard).
const rateDstPort = 9

var rateMetrics = []Metric{
	{Key: "forwarded_mpps", Label: "forwarded Mpps", HigherBetter: true, Digits: 3},
	{Key: "offered_mpps", Label: "offered Mpps", HigherBetter: true, Digits: 3},
	{Key: "delivered_pct", Label: "delivered %", HigherBetter: true, Digits: 1},
}

// RateDetail is what one rate run saw besides its rates: the raw counts
// and where the frames that did not arrive were lost.
type RateDetail struct {
	Mode     string     `json:"mode"`
	Rep      int        `json:"rep"`
	Seconds  float64    `json:"seconds"`
	Offered  uint64     `json:"offered"`
	Received uint64     `json:"received"`
	Routed   uint64     `json:"routed"`    // received with the TTL decremented
	BadIPSum uint64     `json:"bad_ipsum"` // received with a wrong IPv4 header checksum
	Source   gen.Source `json:"source"`
	// Entry says how the host veth A took packets in and where that ran
	// ("NAPI thread ..." or "backlog via RPS ...").
	Entry     string `json:"entry"`
	GROForRun bool   `json:"gro_switched_on"` // GRO switched on on the client host veth for the run
	// XDPErrors: frames dropped at devmap flushes (device = the target:
	// "eth0" is the generator's own XDP_TX into the client's veth, i.e. the
	// host veth's ring was full) and failed redirects, machine-wide.
	XDPErrors []gen.XDPError `json:"xdp_errors,omitempty"`
	// Drops: non-zero increases of drop and error counters of the four
	// veth ends (ethtool -S, ip -s link), /proc/net/softnet_stat and
	// xlane's per-reason counters.
	Drops []CounterDelta `json:"drops,omitempty"`
	// Reasons: xlane's per-reason datapath counters of the two endpoints.
	Reasons []CounterDelta `json:"reasons,omitempty"`
}

// CounterDelta is how much one counter grew during a run.
type CounterDelta struct {
	Where string `json:"where"`
	Name  string `json:"name"`
	Delta uint64 `json:"delta"`
}

func (c CounterDelta) String() string { return fmt.Sprintf("%s %s +%d", c.Where, c.Name, c.Delta) }

// runRate measures the small-packet forwarding rate between the
// containers of p for d.
func runRate(ctx context.Context, topo Topology, p harness.Pair, src gen.Source, d time.Duration, rep int) (Sample, RateDetail, error) {
	det := RateDetail{Mode: topo.Name(), Rep: rep, Source: src}
	if p.ClientMAC == nil || p.NextHopMAC == nil || p.ClientHostIf == "" {
		return nil, det, errors.New("rate: the topology did not record interface names and MACs")
	}
	// Refresh the bridge's FDB and the neighbour entries on the way.
	if _, err := harness.Run(ctx, harness.NSExec(p.Client, "ping", "-c", "1", "-W", "2", p.ServerIP.String())...); err != nil {
		return nil, det, fmt.Errorf("rate: no connectivity before the run: %w", err)
	}

	var undo harness.UndoStack
	defer func() {
		if err := undo.Run(); err != nil {
			log.Printf("rate %s: restore: %v", topo.Name(), err)
		}
	}()
	entry, err := rate.PrepareEntry(ctx, p, src, &undo)
	if err != nil {
		return nil, det, err
	}
	det.Entry, det.GROForRun = entry.Desc, entry.GROOn

	objs, err := gen.Load(gen.Flow{
		DstMAC: p.NextHopMAC, SrcMAC: p.ClientMAC,
		Src: p.ClientIP, Dst: p.ServerIP,
		SrcPort: 40000, DstPort: rateDstPort, TTL: 64,
	}, src)
	if err != nil {
		return nil, det, err
	}
	undo.Push("close generator objects", func(context.Context) error { return objs.Close() })

	if src == gen.SKBs {
		err = ns.WithNetNSPath(filepath.Join(harness.NetnsDir, p.Client), func(ns.NetNS) error {
			ifi, err := net.InterfaceByName(p.ClientIf)
			if err != nil {
				return err
			}
			l, err := objs.AttachBounce(ifi.Index)
			if err != nil {
				return err
			}
			undo.Push("detach bounce", func(context.Context) error { return l.Close() })
			return nil
		})
		if err != nil {
			return nil, det, fmt.Errorf("rate: bounce on %s/%s: %w", p.Client, p.ClientIf, err)
		}
	}

	err = ns.WithNetNSPath(filepath.Join(harness.NetnsDir, p.Server), func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(p.ServerIf)
		if err != nil {
			return err
		}
		l, err := objs.AttachCounter(ifi.Index)
		if err != nil {
			return err
		}
		undo.Push("detach counter", func(context.Context) error { return l.Close() })
		return nil
	})
	if err != nil {
		return nil, det, fmt.Errorf("rate: counter on %s/%s: %w", p.Server, p.ServerIf, err)
	}

	before, err := snapshotCounters(ctx, topo, p)
	if err != nil {
		return nil, det, err
	}
	tps, err := objs.AttachTracepoints()
	if err != nil {
		return nil, det, err
	}
	closeTPs := func() {
		for _, l := range tps {
			l.Close()
		}
		tps = nil
	}
	defer closeTPs()

	// Anchor: no BPF_PROG_RUN call waits for RCU grace periods (bench fw
	// found them idling the generator 95 % of the time;
	// bench/results/notebook-2026-11.md, "The generator").
	run, err := rate.Generate(ctx, objs, p, d, rate.Options{Anchor: true})
	if err != nil {
		return nil, det, err
	}
	elapsed := run.Elapsed
	time.Sleep(100 * time.Millisecond) // frames still in rings
	closeTPs()
	after, err := snapshotCounters(ctx, topo, p)
	if err != nil {
		return nil, det, err
	}
	c, err := objs.Counters()
	if err != nil {
		return nil, det, err
	}
	if det.XDPErrors, err = objs.XDPErrors(); err != nil {
		return nil, det, err
	}
	det.Seconds = elapsed.Seconds()
	det.Offered, det.Received, det.Routed, det.BadIPSum = c.Offered, c.Received, c.Routed, c.BadIPSum
	for _, cd := range diffCounters(before, after) {
		if strings.HasPrefix(cd.Where, "xlane ") && !isDropName(cd.Name) {
			det.Reasons = append(det.Reasons, cd)
		} else if isDropName(cd.Name) {
			det.Drops = append(det.Drops, cd)
		}
	}
	if c.Offered == 0 {
		return nil, det, errors.New("rate: the generator sent nothing")
	}
	if c.Received == 0 {
		return nil, det, fmt.Errorf("rate: none of %d generated frames reached %s/%s (drops: %v %v)",
			c.Offered, p.Server, p.ServerIf, det.XDPErrors, det.Drops)
	}
	s := Sample{
		"offered_mpps":   float64(c.Offered) / det.Seconds / 1e6,
		"forwarded_mpps": float64(c.Received) / det.Seconds / 1e6,
		"delivered_pct":  100 * float64(c.Received) / float64(c.Offered),
	}
	return s, det, nil
}

// counterSnapshot is every counter the rate test watches, by where/name.
type counterSnapshot map[[2]string]uint64

// snapshotCounters reads the counters of the four veth ends, softnet_stat
// and, for xlane, the endpoints' per-reason counters.
func snapshotCounters(ctx context.Context, topo Topology, p harness.Pair) (counterSnapshot, error) {
	s := counterSnapshot{}
	for _, d := range []struct{ ns, dev, where string }{
		{p.Client, p.ClientIf, "client " + p.ClientIf},
		{p.Node, p.ClientHostIf, "host veth A " + p.ClientHostIf},
		{p.Node, p.ServerHostIf, "host veth B " + p.ServerHostIf},
		{p.Server, p.ServerIf, "server " + p.ServerIf},
	} {
		out, err := harness.Run(ctx, harness.NSExec(d.ns, "ethtool", "-S", d.dev)...)
		if err != nil {
			return nil, err
		}
		for k, v := range measure.ParseEthtoolStats(out) {
			s[[2]string{d.where, k}] = v
		}
		out, err = harness.Run(ctx, "ip", "-n", d.ns, "-s", "-j", "link", "show", "dev", d.dev)
		if err != nil {
			return nil, err
		}
		st, err := measure.ParseIPLinkStats(out)
		if err != nil {
			return nil, err
		}
		for k, v := range st {
			s[[2]string{d.where, k}] = v
		}
	}
	if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		for k, v := range measure.ParseSoftnetStat(string(b)) {
			s[[2]string{"softnet_stat (all CPUs, machine-wide)", k}] = v
		}
	}
	if x, ok := topo.(*xlaneTopo); ok {
		for _, ep := range []string{p.ClientEP, p.ServerEP} {
			out, err := x.cli(ctx, "-o", "json", "endpoint", "inspect", ep)
			if err != nil {
				return nil, err
			}
			rs, err := measure.ParseReasons(out)
			if err != nil {
				return nil, err
			}
			for k, v := range rs {
				s[[2]string{"xlane " + ep, k}] = v
			}
		}
	}
	return s, nil
}

// diffCounters lists the counters that grew, in a stable order.
func diffCounters(a, b counterSnapshot) []CounterDelta {
	var out []CounterDelta
	for k, v := range b {
		if v > a[k] {
			out = append(out, CounterDelta{Where: k[0], Name: k[1], Delta: v - a[k]})
		}
	}
	slices.SortFunc(out, func(x, y CounterDelta) int {
		if c := strings.Compare(x.Where, y.Where); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out
}

// isDropName tells drop and error counters from the rest.
func isDropName(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "drop") || strings.Contains(n, "err") || strings.Contains(n, "squeeze")
}

// offloadKeys are the features the notes show: the offloads that decide
// what the XDP modes cost.
var offloadKeys = []string{
	"tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload",
	"tx-checksumming", "scatter-gather", "rx-gro-list", "rx-udp-gro-forwarding",
}

// offloadSummary is a one-line summary of ethtool -k of dev in ns.
func offloadSummary(ctx context.Context, ns, dev string) string {
	f, err := rate.EthtoolFeatures(ctx, ns, dev)
	if err != nil {
		return "ethtool -k failed: " + err.Error()
	}
	var parts []string
	for _, k := range offloadKeys {
		if v, ok := f[k]; ok {
			parts = append(parts, k+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}

const rateMethod = "64-byte packets (60 B + FCS: UDP with 18 B of payload, its checksum field holding the pseudo-header sum " +
	"as a socket with TX checksum offload leaves it), written in full by an XDP program run with BPF_PROG_RUN and " +
	"BPF_F_TEST_XDP_LIVE_FRAMES in the client netns. skb source: XDP_PASS turns each frame into an skb received on the " +
	"client's eth0 and a tcx program sends it out of eth0, so the host veth gets skbs as from a socket; xdp-frame source: " +
	"XDP_TX sends xdp_frames out of eth0 into the host veth's NAPI ring (GRO switched on for the run where no native XDP " +
	"program gives that veth NAPI). Counted and dropped by a tcx ingress program on the server's eth0 (the receiver " +
	"builds its skb, no socket). offered = packets generated per second, forwarded = packets counted at the server per " +
	"second; losses located with ethtool -S and ip -s link of the four veth ends, /proc/net/softnet_stat, xlane's " +
	"per-reason counters and raw tracepoint programs on xdp:xdp_devmap_xmit and xdp:xdp_redirect_err"

// rateNotes sums each mode's rate runs into one line: how much arrived,
// whether it was routed with a valid header, and where the rest was lost.
func rateNotes(runs []RateDetail, modes []string) []string {
	var notes []string
	for _, src := range []gen.Source{gen.SKBs, gen.Frames} {
		for _, mode := range modes {
			if note := rateNote(runs, mode, src); note != "" {
				notes = append(notes, note)
			}
		}
	}
	return notes
}

// rateNote sums the runs of one mode and source.
func rateNote(runs []RateDetail, mode string, src gen.Source) string {
	{
		var n int
		var entry string
		var offered, received, routed, bad uint64
		drops := map[string]uint64{}
		reasons := map[string]uint64{}
		for _, r := range runs {
			if r.Mode != mode || r.Source != src {
				continue
			}
			n++
			entry = r.Entry
			offered, received, routed, bad = offered+r.Offered, received+r.Received, routed+r.Routed, bad+r.BadIPSum
			for _, e := range r.XDPErrors {
				drops[e.Where()] += e.Frames
			}
			for _, d := range r.Drops {
				drops[d.Where+" "+d.Name] += d.Delta
			}
			for _, d := range r.Reasons {
				reasons[d.Where+" "+d.Name] += d.Delta
			}
		}
		if n == 0 || offered == 0 {
			return ""
		}
		line := fmt.Sprintf("rate %s, %s source (%d run(s); entry: %s): %s of %s packets arrived (%.1f%%); routed (TTL decremented) %.1f%% of them, bad IPv4 header checksums %d",
			mode, src, n, entry, humanCount(received), humanCount(offered), 100*float64(received)/float64(offered),
			100*float64(routed)/float64(max(received, 1)), bad)
		if offered > received {
			line += fmt.Sprintf("; lost %s, counters: %s", humanCount(offered-received), topCounts(drops, 8))
		}
		if float64(received) > 0.85*float64(offered) {
			line += "; NOTE: more than 85% arrived, so the generator, not the datapath, may have set the pace: " +
				"read this forwarded rate as a lower bound"
		}
		if len(reasons) > 0 {
			line += "; xlane reasons: " + topCounts(reasons, 6)
		}
		return line
	}
}

// topCounts lists the largest n entries of m as "name +count".
func topCounts(m map[string]uint64, n int) string {
	type kv struct {
		k string
		v uint64
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	if len(all) == 0 {
		return "none"
	}
	var parts []string
	for i, e := range all {
		if i == n {
			parts = append(parts, fmt.Sprintf("(%d more)", len(all)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s +%s", e.k, humanCount(e.v)))
	}
	return strings.Join(parts, ", ")
}

func humanCount(v uint64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", float64(v)/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", float64(v)/1e3)
	}
	return strconv.FormatUint(v, 10)
}
