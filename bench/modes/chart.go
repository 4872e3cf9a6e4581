package main

// The bar chart (modes-latest.svg), written by hand: one panel per kind of
// number, grouped bars per test, one colour per mode, bars at the median
// with min-max whiskers.

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// modeColours: grey for the Docker-style baseline, then the Okabe-Ito
// palette (readable with the common colour-vision deficiencies).
var modeColours = map[string]string{
	"docker":      "#8c8c8c",
	"kernel":      "#0072b2",
	"tc":          "#009e73",
	"tc-bigtcp":   "#56b4e9",
	"xdp-generic": "#e69f00",
	"xdp":         "#d55e00",
}

// chartBar is one group of bars: a test's metric across the modes.
type chartGroup struct {
	label []string // lines under the group
	mr    MetricResult
}

type chartPanel struct {
	title  string
	unit   string
	groups []chartGroup
}

// chartPanels picks what the chart shows from the report's tests.
func chartPanels(rep *Report) []chartPanel {
	find := func(t TestResult, key string) (MetricResult, bool) {
		for _, m := range t.Metrics {
			if m.Key == key {
				return m, len(m.Modes) > 0
			}
		}
		return MetricResult{}, false
	}
	tput := chartPanel{title: "TCP throughput", unit: "Gbit/s, higher is better"}
	cost := chartPanel{title: "TCP CPU cost", unit: "CPU-seconds per Gbit, lower is better"}
	latSame := chartPanel{title: "TCP ping-pong latency, client and server on one CPU", unit: "µs, lower is better"}
	latCross := chartPanel{title: "TCP ping-pong latency, across CPUs", unit: "µs, lower is better (this VM's cross-CPU wakeup dominates)"}
	rate := chartPanel{title: "64-byte UDP forwarding rate, one datapath core", unit: "million packets per second reaching the server, higher is better"}
	offered := chartPanel{title: "64-byte UDP, offered by the generator (other core)", unit: "million packets per second; what did not fit was dropped"}
	for _, t := range rep.Tests {
		switch t.Kind {
		case "tcp":
			label := []string{fmt.Sprintf("%d stream%s", t.Streams, map[bool]string{true: "s"}[t.Streams > 1]), fmt.Sprintf("MTU %d", t.MTU)}
			if m, ok := find(t, "gbps"); ok {
				tput.groups = append(tput.groups, chartGroup{label, m})
			}
			if m, ok := find(t, "cpu_s_per_gbit"); ok {
				cost.groups = append(cost.groups, chartGroup{label, m})
			}
		case "latency":
			lat := &latSame
			if t.ServerCPUs != t.ClientCPUs {
				lat = &latCross
			}
			for _, k := range []string{"avg_us", "p50_us", "p99_us"} {
				if m, ok := find(t, k); ok {
					lat.groups = append(lat.groups, chartGroup{[]string{strings.TrimSuffix(k, "_us")}, m})
				}
			}
		case "rate":
			// Two panels: the offered rate would dwarf the forwarded one.
			if m, ok := find(t, "forwarded_mpps"); ok {
				rate.groups = append(rate.groups, chartGroup{[]string{t.Source.String() + " source"}, m})
			}
			if m, ok := find(t, "offered_mpps"); ok {
				offered.groups = append(offered.groups, chartGroup{[]string{t.Source.String() + " source"}, m})
			}
		}
	}
	var out []chartPanel
	for _, p := range []chartPanel{tput, cost, latSame, latCross, rate, offered} {
		if len(p.groups) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten; the axis
// gets 5 intervals of a fifth of it.
func niceCeil(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*e*1.0000001 {
			return m * e
		}
	}
	return 10 * e
}

// tickLabel formats an axis value with as few decimals as it needs.
func tickLabel(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// valueLabel formats a bar's value with about three significant digits.
func valueLabel(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

var xmlEsc = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// chartSVG draws the report.
func chartSVG(rep *Report) string {
	modes := rep.Config.Modes
	panels := chartPanels(rep)
	const (
		panelW, panelH = 620.0, 360.0
		marginL        = 62.0 // y axis labels
		marginR        = 16.0
		marginT        = 52.0 // panel title
		marginB        = 48.0 // group labels
		headerH        = 92.0
		footerH        = 44.0
	)
	cols := min(2, max(1, len(panels)))
	rows := (len(panels) + cols - 1) / cols
	W := float64(cols) * panelW
	H := headerH + float64(rows)*panelH + footerH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans, Verdana, Arial, sans-serif">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="20" y="32" font-size="20" font-weight="bold" fill="#222">xlane datapath modes, container to container on one node</text>`+"\n")
	m := rep.Machine
	fmt.Fprintf(&b, `<text x="20" y="54" font-size="12" fill="#555">%s · Linux %s · %d CPUs · loadavg %s → %s · %d repetition(s) (%s), modes interleaved</text>`+"\n",
		rep.Started.UTC().Format("2006-01-02 15:04 MST"), xmlEsc.Replace(m.Kernel), m.NProc, xmlEsc.Replace(m.LoadStart), xmlEsc.Replace(m.LoadEnd),
		rep.Config.Repetitions, xmlEsc.Replace(rep.Config.Duration))
	// Legend.
	x := 20.0
	for _, mode := range modes {
		fmt.Fprintf(&b, `<rect x="%.1f" y="68" width="14" height="14" fill="%s"/>`, x, modeColours[mode])
		fmt.Fprintf(&b, `<text x="%.1f" y="80" font-size="13" fill="#222">%s</text>`+"\n", x+19, xmlEsc.Replace(modeLabel(mode)))
		x += 19 + 8*float64(len(modeLabel(mode))) + 26
	}
	for i, p := range panels {
		ox := float64(i%cols) * panelW
		oy := headerH + float64(i/cols)*panelH
		drawPanel(&b, p, modes, ox, oy, panelW, panelH, marginL, marginR, marginT, marginB)
	}
	fmt.Fprintf(&b, `<text x="20" y="%.0f" font-size="11" fill="#555">Bars: medians; whiskers: lowest to highest repetition. Ratios and raw samples: modes-latest.md and modes-*.json. Generated by go run ./bench/modes (%s).</text>`+"\n",
		H-18, rep.Finished.UTC().Format(time.RFC3339))
	b.WriteString("</svg>\n")
	return b.String()
}

// modeLabel is a mode's legend entry.
func modeLabel(mode string) string {
	switch mode {
	case "docker":
		return "docker (bridge + iptables)"
	case "kernel":
		return "xlane kernel"
	}
	return "xlane " + mode
}

func drawPanel(b *strings.Builder, p chartPanel, modes []string, ox, oy, w, h, mL, mR, mT, mB float64) {
	plotX, plotY := ox+mL, oy+mT
	plotW, plotH := w-mL-mR, h-mT-mB
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="15" font-weight="bold" fill="#222">%s</text>`, ox+12, oy+22, xmlEsc.Replace(p.title))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" fill="#555">%s</text>`+"\n", ox+12, oy+38, xmlEsc.Replace(p.unit))
	// The scale follows the medians (with room for the labels); a
	// whisker beyond it is cut at the top and marked with an arrow, so
	// one outlying repetition does not flatten the rest.
	top := 0.0
	for _, g := range p.groups {
		for _, st := range g.mr.Modes {
			top = math.Max(top, st.Median)
		}
	}
	top = niceCeil(top * 1.2)
	y := func(v float64) float64 { return plotY + plotH - math.Min(v, top)/top*plotH }
	for i := 0; i <= 5; i++ {
		v := top * float64(i) / 5
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, plotX, y(v), plotX+plotW, y(v),
			map[bool]string{true: "#888", false: "#e4e4e4"}[i == 0])
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11" fill="#555" text-anchor="end">%s</text>`+"\n", plotX-6, y(v)+4, tickLabel(v))
	}
	groupW := plotW / float64(len(p.groups))
	barW := math.Min(34, groupW*0.8/float64(len(modes)))
	for gi, g := range p.groups {
		gx := plotX + groupW*float64(gi) + (groupW-barW*float64(len(modes)))/2
		for mi, mode := range modes {
			st, ok := g.mr.Modes[mode]
			if !ok {
				continue
			}
			bx := gx + barW*float64(mi)
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`,
				bx+1, y(st.Median), barW-2, plotY+plotH-y(st.Median), modeColours[mode], xmlEsc.Replace(mode), valueLabel(st.Median))
			cx := bx + barW/2
			labelY := y(st.Median) - 4
			if len(st.Samples) > 1 && st.Max > st.Min {
				fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fM%.1f %.1fH%.1f" stroke="#222" stroke-width="1" fill="none"/>`,
					cx, y(st.Min), y(st.Max), cx-3, y(st.Min), cx+3)
				if st.Max > top { // cut: an arrow head instead of the cap
					fmt.Fprintf(b, `<path d="M%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="#222"><title>highest: %s</title></path>`,
						cx-3.5, y(top)+6, cx, y(top), cx+3.5, y(top)+6, valueLabel(st.Max))
				} else {
					fmt.Fprintf(b, `<path d="M%.1f %.1fH%.1f" stroke="#222" stroke-width="1"/>`, cx-3, y(st.Max), cx+3)
				}
				labelY = math.Min(labelY, y(st.Max)-4)
			}
			if labelY < plotY+28 { // no room above: write it inside the bar, in white
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="#fff" text-anchor="end" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
					cx+3.5, y(st.Median)+4, cx+3.5, y(st.Median)+4, valueLabel(st.Median))
				continue
			}
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="#333" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
				cx+3.5, labelY, cx+3.5, labelY, valueLabel(st.Median))
		}
		for li, l := range g.label {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" fill="#222" text-anchor="middle">%s</text>`,
				plotX+groupW*(float64(gi)+0.5), plotY+plotH+17+14*float64(li), xmlEsc.Replace(l))
		}
		b.WriteString("\n")
	}
}
