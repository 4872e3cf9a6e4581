package main

// The growth chart (-chart DIR): the runs in DIR (scale-*.json), the
// latest of each size, as the cost against the cluster's objects, with
// the growth per object between sizes: a text table (stdout) and an SVG
// (DIR/scale-growth.svg), no plotting library.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// sizePoint is one size's run.
type sizePoint struct {
	rep     *report
	file    string
	objects int // what xlaned's informers hold: Nodes, Pods, Services, their slices, policies
}

// objectsOf counts a run's cluster objects (a Service and its slice, at
// 1-50 endpoints one each).
func objectsOf(r *report) int { return r.Nodes + 2 + r.Pods + 2*r.Services + r.Policies }

// loadSizes reads DIR's runs: per size, the latest with a cold start.
func loadSizes(dir string) ([]sizePoint, error) {
	files, err := filepath.Glob(filepath.Join(dir, "scale-*.json"))
	if err != nil {
		return nil, err
	}
	latest := map[int]sizePoint{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := &report{}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if r.Cold == nil {
			continue
		}
		p := sizePoint{rep: r, file: filepath.Base(f), objects: objectsOf(r)}
		if old, ok := latest[p.objects]; !ok || old.rep.Started.Before(r.Started) {
			latest[p.objects] = p
		}
	}
	var out []sizePoint
	for _, p := range latest {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b sizePoint) int { return a.objects - b.objects })
	return out, nil
}

// series is one measure charted.
type series struct {
	name, unit string
	of         func(*report) float64
}

var chartSeries = []series{
	{"RSS after the cold start", "MB", func(r *report) float64 { return r.Cold.RSSMB }},
	{"peak RSS", "MB", func(r *report) float64 { return r.Cold.PeakRSSMB }},
	{"cold start to programmed", "s", func(r *report) float64 { return r.Cold.Took.Seconds() }},
	{"cold start CPU", "s", func(r *report) float64 { return r.Cold.CPU.Seconds() }},
	{"BPF maps + Maglev tables", "MB", func(r *report) float64 { return float64(r.Cold.MapBytes+r.Cold.TableBytes) / 1e6 }},
}

// growthTable is the sizes and, between neighbours, the growth per 1,000
// objects.
func growthTable(pts []sizePoint) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("| nodes / pods / Services / policies | objects |")
	for _, s := range chartSeries {
		w(" %s (%s) |", s.name, s.unit)
	}
	w(" run |\n|---|---:|")
	for range chartSeries {
		w("---:|")
	}
	w("---|\n")
	for i, p := range pts {
		r := p.rep
		w("| %d / %d / %d / %d | %d |", r.Nodes, r.Pods, r.Services, r.Policies, p.objects)
		for _, s := range chartSeries {
			w(" %.1f |", s.of(r))
		}
		w(" %s (load %s) |\n", p.file, r.LoadStart)
		if i+1 < len(pts) {
			q := pts[i+1]
			d := float64(q.objects-p.objects) / 1000
			w("| … growth per 1,000 objects | |")
			for _, s := range chartSeries {
				w(" %+.2f |", (s.of(q.rep)-s.of(r))/d)
			}
			w(" |\n")
		}
	}
	return b.String()
}

// growthSVG draws each series against the objects, one panel each.
func growthSVG(pts []sizePoint) string {
	const pw, ph, pad, left = 300, 170, 14, 46
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	n := len(chartSeries)
	width, height := n*(pw+pad)+pad, ph+70
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	w(`<text x="%d" y="16" font-size="13">xlaned in Kubernetes mode against the cluster's objects (bench/scale; Nodes, Pods, Services, EndpointSlices, NetworkPolicies)</text>`+"\n", pad)
	maxX := 0
	for _, p := range pts {
		maxX = max(maxX, p.objects)
	}
	for i, s := range chartSeries {
		x0, y0 := pad+i*(pw+pad), 30
		maxY := 0.0
		for _, p := range pts {
			maxY = max(maxY, s.of(p.rep))
		}
		if maxY == 0 {
			maxY = 1
		}
		maxY *= 1.15
		px := func(o int) float64 { return float64(x0+left) + float64(o)/float64(max(maxX, 1))*float64(pw-left-10) }
		py := func(v float64) float64 { return float64(y0+ph) - v/maxY*float64(ph-20) }
		w(`<text x="%d" y="%d">%s (%s)</text>`+"\n", x0+left, y0+10, s.name, s.unit)
		w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0+left, y0+ph, x0+pw-10, y0+ph)
		w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0+left, y0+20, x0+left, y0+ph)
		w(`<text x="%d" y="%.0f" text-anchor="end">%.0f</text>`+"\n", x0+left-3, py(maxY/1.15)+4, maxY/1.15)
		w(`<text x="%d" y="%d" text-anchor="end">0</text>`+"\n", x0+left-3, y0+ph+4)
		w(`<text x="%d" y="%d" text-anchor="end">%d objects</text>`+"\n", x0+pw-10, y0+ph+14, maxX)
		var path []string
		for _, p := range pts {
			path = append(path, fmt.Sprintf("%.1f,%.1f", px(p.objects), py(s.of(p.rep))))
		}
		w(`<polyline fill="none" stroke="steelblue" stroke-width="2" points="%s"/>`+"\n", strings.Join(path, " "))
		for _, p := range pts {
			v := s.of(p.rep)
			w(`<circle cx="%.1f" cy="%.1f" r="3" fill="steelblue"/><text x="%.1f" y="%.1f" text-anchor="middle">%.1f</text>`+"\n",
				px(p.objects), py(v), px(p.objects), py(v)-6, v)
			w(`<text x="%.1f" y="%d" text-anchor="middle" fill="gray">%d nodes</text>`+"\n", px(p.objects), y0+ph+28, p.rep.Nodes)
		}
	}
	w("</svg>\n")
	return b.String()
}

// chartMain writes DIR/scale-growth.svg and prints the table.
func chartMain(dir string) error {
	pts, err := loadSizes(dir)
	if err != nil {
		return err
	}
	if len(pts) == 0 {
		return fmt.Errorf("-chart %s: no scale-*.json with a cold start", dir)
	}
	fmt.Print(growthTable(pts))
	return os.WriteFile(filepath.Join(dir, "scale-growth.svg"), []byte(growthSVG(pts)), 0o644)
}
