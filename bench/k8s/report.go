package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

// median is the median of metric over the samples of (level, mode).
func median(ss []sample, level int, mode string, metric func(connrate.Result) float64) (float64, int) {
	var xs []float64
	for _, s := range ss {
		if s.Level == level && s.Mode == mode {
			xs = append(xs, metric(s.Result))
		}
	}
	if len(xs) == 0 {
		return 0, 0
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2], len(xs)
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2, len(xs)
}

// percentile is the p-th percentile (nearest rank) of xs.
func percentile(xs []float64, p float64) float64 { return measure.Percentile(xs, p) }

func short(mode string) string {
	return strings.Replace(mode, "kube-proxy-", "kp-", 1)
}

func markdown(rep *report, o options) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("Run of %s, %s → %s UTC: kernel %s, %d × %s; loadavg %s at the start, %s at the end; Kubernetes %s (kube-apiserver, kube-proxy); %s; %s; commit %s. %d repetitions × %s per rate test, %d clients, modes rotated per repetition.\n\n",
		rep.Started.UTC().Format("2006-01-02 15:04"), rep.Started.UTC().Format("15:04"), rep.Finished.UTC().Format("15:04"),
		rep.Kernel, rep.NProc, rep.CPU, rep.LoadStart, rep.LoadEnd, rep.K8sVersion, rep.Iptables, rep.Nft, rep.GitCommit,
		o.Reps, o.Duration, o.conc)
	var base []string
	for _, m := range o.modes {
		if m != "xlane" && slices.Contains(o.modes, "xlane") {
			base = append(base, m)
		}
	}
	cps := func(r connrate.Result) float64 { return r.CPS }
	p99 := func(r connrate.Result) float64 { return r.P99Us }
	w("Connections per second from a pod through ClusterIPs (connect, read one byte, close; a random Service of the level per connection), medians:\n\n")
	head, sep := "| Services |", "|---:|"
	for _, m := range o.modes {
		head += " " + short(m) + " conn/s | p99 µs |"
		sep += "---:|---:|"
	}
	for _, m := range base {
		head += " xlane ÷ " + short(m) + " |"
		sep += "---:|"
	}
	w("%s\n%s\n", head, sep)
	for _, lv := range o.levels {
		row := fmt.Sprintf("| %d |", lv)
		for _, m := range o.modes {
			v, n := median(rep.Samples, lv, m, cps)
			p, _ := median(rep.Samples, lv, m, p99)
			if n == 0 {
				row += " – | – |"
			} else {
				row += fmt.Sprintf(" %.0f | %.0f |", v, p)
			}
		}
		x, _ := median(rep.Samples, lv, "xlane", cps)
		for _, m := range base {
			if v, n := median(rep.Samples, lv, m, cps); n > 0 && v > 0 {
				row += fmt.Sprintf(" %.2fx |", x/v)
			} else {
				row += " – |"
			}
		}
		w("%s\n", row)
	}
	first, last := o.levels[0], o.levels[len(o.levels)-1]
	w("\nFlatness, the rate at %d Services ÷ at %d:", last, first)
	for _, m := range o.modes {
		a, _ := median(rep.Samples, first, m, cps)
		z, _ := median(rep.Samples, last, m, cps)
		if a > 0 && z > 0 {
			w(" %s %.2f;", short(m), z/a)
		}
	}
	w("\n\nProgramming: from the last create call of a level to a sample of its ClusterIPs (up to %d, the last one included) answering through each proxy (the proxies run throughout; creating the objects is the API server's time):\n\n", o.sample)
	head, sep = "| Services | created in |", "|---:|---:|"
	for _, m := range o.modes {
		head += " " + short(m) + " |"
		sep += "---:|"
	}
	w("%s\n%s\n", head, sep)
	for _, lv := range o.levels {
		if len(rep.Lag[lv]) == 0 {
			continue
		}
		row := fmt.Sprintf("| %d | %.1f s |", lv, rep.Create[lv].Seconds())
		for _, m := range o.modes {
			if d, ok := rep.Lag[lv][m]; ok {
				row += fmt.Sprintf(" %s |", fmtDur(d))
			} else {
				row += " – |"
			}
		}
		w("%s\n", row)
	}
	w("\n| %d Services from nothing (created in %.1f s) | EndpointSlice change p50 | p99 | max | changes |\n|---|---:|---:|---:|---:|\n", last, rep.Create[last].Seconds())
	for _, m := range o.modes {
		prog := "–"
		if d, ok := rep.Program[m]; ok {
			prog = fmtDur(d)
		} else if why, ok := rep.NotProgrammed[m]; ok {
			prog = why
		}
		if m == "xlane" && rep.ProgramFromAPI > 0 {
			prog += fmt.Sprintf(" (%s after its API answered)", fmtDur(rep.ProgramFromAPI))
		}
		ms := rep.ChangeMs[m]
		lost := ""
		if rep.ChangeLost[m] > 0 {
			lost = fmt.Sprintf(" (%d not seen in 10 s)", rep.ChangeLost[m])
		}
		w("| %s: %s | %.1f ms | %.1f ms | %.1f ms | %d%s |\n", short(m), prog, percentile(ms, 50), percentile(ms, 99), slices.Max(append([]float64{math.Inf(-1)}, ms...)), len(ms), lost)
	}
	w("\nFrom nothing: every proxy stopped and its rules removed (kube-proxy --cleanup; xlane: its Kubernetes services pruned) before the level's Services were created; then each in turn, the others idle, from its process start to the sampled ClusterIPs answering. A change: the probe Service's only endpoint moved to another backend (an EndpointSlice update), from the update call to the first connection the new backend answers (a prober per client pod, a connection a millisecond); every proxy sees the same change; 1.1 s between changes (kube-proxy's minSyncPeriod is 1 s). p99 is nearest-rank: with %d changes (fewer than 100), the largest.\n", o.changes)
	if len(rep.PodToPod) > 0 {
		w("\nPod to pod across two nodes (VXLAN between them), medians of %d repetitions × %s, setups rotated: xlane (two xlaned --kubernetes, BPF overlay, tc mode) vs the reference CNI `bridge` plugin + kube-proxy (iptables) + the kernel's VXLAN device routed flannel-style:\n\n", o.Reps, o.Duration)
		w("| test | xlane | bridge-vxlan | xlane ÷ bridge-vxlan |\n|---|---:|---:|---:|\n")
		for _, t := range []struct{ id, label string }{{"iperf3-1", "TCP, 1 stream, Gbit/s"},
			{"conn-pod", fmt.Sprintf("conn/s pod → pod, %d clients", o.conc)}, {"conn-clusterip", fmt.Sprintf("conn/s pod → ClusterIP → pod on the other node, %d clients", o.conc)}} {
			v := map[string]float64{}
			failed := 0
			for _, s := range podSetups {
				var xs []float64
				for _, r := range rep.PodToPod {
					if r.Setup == s && r.Test == t.id {
						xs = append(xs, r.Value)
						failed += r.Failed
					}
				}
				v[s] = percentile(xs, 50)
			}
			ratio := "–"
			if v["bridge-vxlan"] > 0 {
				ratio = fmt.Sprintf("%.2fx", v["xlane"]/v["bridge-vxlan"])
			}
			digits := 0
			if t.id == "iperf3-1" {
				digits = 2
			}
			w("| %s | %.*f | %.*f | %s |\n", t.label, digits, v["xlane"], digits, v["bridge-vxlan"], ratio)
			if failed > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("pod to pod, %s: %d failed connections", t.label, failed))
			}
		}
	}
	profileMarkdown(w, rep, o)
	// The targets.
	w("\nIssue 17's targets, this run:\n\n")
	if d, ok := rep.Program["xlane"]; ok {
		w("- %d Services programmed in ≤ 10 s: xlane %s from its process start, %s from its API answering (%s)\n", last, fmtDur(d),
			fmtDur(rep.ProgramFromAPI), verdict(d <= 10*time.Second))
	}
	if ms := rep.ChangeMs["xlane"]; len(ms) > 0 {
		p := percentile(ms, 99)
		w("- one change applied in ≤ 100 ms p99: xlane %.1f ms (%s)\n", p, verdict(p <= 100 && rep.ChangeLost["xlane"] == 0))
	}
	x, nx := median(rep.Samples, last, "xlane", cps)
	if v, n := median(rep.Samples, last, "kube-proxy-nftables", cps); n > 0 && nx > 0 && v > 0 {
		w("- connection rate at %d Services ≥ 1.5x kube-proxy nftables: %.2fx (%s)\n", last, x/v, verdict(x/v >= 1.5))
	}
	if a, n := median(rep.Samples, first, "xlane", cps); n > 0 && nx > 0 {
		w("- flat (±10 %%) from %d to %d Services: %.2f (%s)\n", first, last, x/a, verdict(math.Abs(x/a-1) <= 0.10))
	}
	if rep.LoadStart != "" {
		w("\nThe machine (2 cores) was shared with other work during this run (loadavg above): every figure is an upper bound of cost; the ratios come from the same run, modes interleaved.\n")
	}
	if len(rep.XlaneClient) > 0 {
		w("\nxlane's datapath counters of the client pod after the rate tests (`xlane endpoint inspect client`):")
		for _, r := range rep.XlaneClient {
			drop := ""
			if r.Drop {
				drop = " (drop)"
			}
			w(" %s %s %d%s;", r.Direction, r.Reason, r.Packets, drop)
		}
		w("\n")
	}
	for _, n := range rep.Notes {
		w("\n%s\n", n)
	}
	return b.String()
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
