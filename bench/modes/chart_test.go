package main

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChartSVG renders every results file in bench/results and checks
// that the SVG is well-formed and has a bar per mode and metric.
func TestChartSVG(t *testing.T) {
	dir := "../results" // XLB_CHART_IN, XLB_CHART_OUT: render other results to look at
	if d := os.Getenv("XLB_CHART_IN"); d != "" {
		dir = d
	}
	// This benchmark's reports: foundation-* and modes-*;
	// the other benchmarks (fw, nat, docker) write reports of their own.
	var files []string
	for _, pat := range []string{"foundation-*.json", "modes-*.json"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("no results to render")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		svg := chartSVG(&rep)
		d := xml.NewDecoder(strings.NewReader(svg))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: SVG not well-formed: %v", f, err)
			}
		}
		want := 0
		for _, p := range chartPanels(&rep) {
			for _, g := range p.groups {
				want += len(g.mr.Modes)
			}
		}
		if got := strings.Count(svg, "<rect x=") - len(rep.Config.Modes); got != want || want == 0 {
			t.Errorf("%s: %d bars, want %d", f, got, want)
		}
		if os.Getenv("XLB_CHART_OUT") != "" {
			os.WriteFile(filepath.Join(os.Getenv("XLB_CHART_OUT"), filepath.Base(f)+".svg"), []byte(svg), 0o644)
		}
	}
}
