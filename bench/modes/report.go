package main

// The report: medians per test, metric and mode, ratios between modes of
// the same run, printed as a table and written as JSON and markdown.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// Report is the whole result of one run (the JSON file).
type Report struct {
	Started    time.Time       `json:"started"`
	Finished   time.Time       `json:"finished"`
	Machine    harness.Machine `json:"machine"`
	Config     RunConfig       `json:"config"`
	Topologies []TopoInfo      `json:"topologies"`
	Notes      []string        `json:"notes"`
	Tests      []TestResult    `json:"tests"`
	// Rate is every small-packet rate run: raw counts and where frames
	// were lost.
	Rate []RateDetail `json:"rate_runs,omitempty"`
	// Verdicts are issue 19's targets judged on this run (-observe).
	Verdicts []Verdict `json:"verdicts,omitempty"`
	// ProgRun is -observe's BPF_PROG_RUN part (progrun.go).
	ProgRun *ProgRunReport `json:"prog_run,omitempty"`
}

// RunConfig is what the run was asked to do.
type RunConfig struct {
	Repetitions int      `json:"repetitions"`
	Duration    string   `json:"duration"`
	Modes       []string `json:"modes"`
	MTUs        []int    `json:"mtus"`
	Order       string   `json:"order"`
	Pinning     string   `json:"pinning"`
	CPUMethod   string   `json:"cpu_method"`
	RateMethod  string   `json:"rate_method"`
}

// TopoInfo names a mode and how it connects the containers.
type TopoInfo struct {
	Mode     string `json:"mode"`
	Describe string `json:"describe"`
}

// TestResult is one test with every metric across modes.
type TestResult struct {
	Test
	Metrics []MetricResult `json:"metrics"`
}

// median is mode's median of the metric key in t; 0 where t has none.
func (t TestResult) median(key, mode string) float64 {
	for _, m := range t.Metrics {
		if m.Key == key {
			return m.Modes[mode].Median
		}
	}
	return 0
}

// MetricResult is one metric of one test: per-mode statistics and the
// ratios between the modes' medians.
type MetricResult struct {
	Metric
	Modes  map[string]ModeStat `json:"modes"`
	Ratios map[string]float64  `json:"ratios"` // "tc/kernel": median(tc)/median(kernel); only finite ones
	// Paired is, per ratio, the ratios within each repetition (a's sample
	// over b's of the same repetition): their median and spread. The
	// table shows these under -observe (observe.go).
	Paired map[string]PairedRatio `json:"paired_ratios,omitempty"`
}

// PairedRatio is the per-repetition ratios of two modes.
type PairedRatio struct {
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples"`
}

// pairedRatio is a[i]/b[i] for every repetition i both have (finite ones
// only); ok is false when there is none.
func pairedRatio(a, b []float64) (PairedRatio, bool) {
	pr := PairedRatio{Min: math.Inf(1), Max: math.Inf(-1)}
	for i := range min(len(a), len(b)) {
		v := measure.Ratio(a[i], b[i])
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		pr.Samples = append(pr.Samples, v)
		pr.Min, pr.Max = math.Min(pr.Min, v), math.Max(pr.Max, v)
	}
	if len(pr.Samples) == 0 {
		return pr, false
	}
	pr.Median = measure.Median(pr.Samples)
	return pr, true
}

// ModeStat is a metric's samples of one mode, in repetition order.
type ModeStat struct {
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples"`
}

// ratioPairs are the comparisons reported for the modes that ran,
// numerator/denominator: every other mode against kernel, then every
// other mode against docker (docker/kernel is kernel/docker inverted).
func ratioPairs(modes []string) [][2]string {
	var out [][2]string
	for _, base := range []string{"kernel", "docker"} {
		if !slices.Contains(modes, base) {
			continue
		}
		for _, m := range modes {
			if m != base && !(base == "kernel" && m == "docker") {
				out = append(out, [2]string{m, base})
			}
		}
	}
	// The observability variants (observe.go) against plain tc.
	if slices.Contains(modes, "tc") {
		for _, m := range modes {
			if netMode, v := splitVariant(m); netMode == "tc" && v != "" {
				out = append(out, [2]string{m, "tc"})
			}
		}
	}
	return out
}

// shortMode abbreviates a mode for ratio column headers.
func shortMode(m string) string {
	switch m {
	case "docker":
		return "dock"
	case "kernel":
		return "kern"
	case "xdp-generic":
		return "xdpg"
	case "tc-bigtcp":
		return "tcbig"
	}
	return m
}

// results collects samples: test ID -> mode -> samples in order.
type results map[string]map[string][]Sample

func (r results) add(test, mode string, s Sample) {
	if r[test] == nil {
		r[test] = map[string][]Sample{}
	}
	r[test][mode] = append(r[test][mode], s)
}

// summarize turns the samples into TestResults.
func summarize(ts []Test, modes []string, r results) []TestResult {
	var out []TestResult
	for _, t := range ts {
		tr := TestResult{Test: t}
		for _, m := range t.Metrics() {
			mr := MetricResult{Metric: m, Modes: map[string]ModeStat{}, Ratios: map[string]float64{}, Paired: map[string]PairedRatio{}}
			for _, mode := range modes {
				var xs []float64
				for _, s := range r[t.ID][mode] {
					xs = append(xs, s[m.Key])
				}
				if len(xs) == 0 {
					continue
				}
				st := ModeStat{Median: measure.Median(xs), Min: math.Inf(1), Max: math.Inf(-1), Samples: xs}
				for _, x := range xs {
					st.Min, st.Max = math.Min(st.Min, x), math.Max(st.Max, x)
				}
				mr.Modes[mode] = st
			}
			for _, p := range ratioPairs(modes) {
				a, aok := mr.Modes[p[0]]
				b, bok := mr.Modes[p[1]]
				if v := measure.Ratio(a.Median, b.Median); aok && bok && !math.IsNaN(v) {
					mr.Ratios[p[0]+"/"+p[1]] = v
				}
				if pr, ok := pairedRatio(a.Samples, b.Samples); aok && bok && ok {
					mr.Paired[p[0]+"/"+p[1]] = pr
				}
			}
			tr.Metrics = append(tr.Metrics, mr)
		}
		out = append(out, tr)
	}
	return out
}

// activeRatios are the ratio columns whose modes both ran.
func activeRatios(modes []string) []string {
	var out []string
	for _, p := range ratioPairs(modes) {
		out = append(out, p[0]+"/"+p[1])
	}
	return out
}

func arrow(m Metric) string {
	if m.HigherBetter {
		return "↑"
	}
	return "↓"
}

// tableRows lays the results out as rows of cells: a header, then one row
// per test and metric.
func tableRows(rep *Report) [][]string {
	modes := rep.Config.Modes
	ratios := activeRatios(modes)
	header := append([]string{"test", "metric"}, modes...)
	for _, r := range ratios {
		a, b, _ := strings.Cut(r, "/")
		header = append(header, shortMode(a)+"/"+shortMode(b))
	}
	rows := [][]string{header}
	for _, t := range rep.Tests {
		for i, m := range t.Metrics {
			title := ""
			if i == 0 {
				title = t.Title
			}
			row := []string{title, m.Label + " " + arrow(m.Metric)}
			for _, mode := range modes {
				if st, ok := m.Modes[mode]; ok {
					row = append(row, fmt.Sprintf("%.*f", m.Digits, st.Median))
				} else {
					row = append(row, "-")
				}
			}
			for _, r := range ratios {
				if pr, ok := m.Paired[r]; ok && observing {
					row = append(row, fmt.Sprintf("%.3fx (%.3f–%.3f)", pr.Median, pr.Min, pr.Max))
				} else if v, ok := m.Ratios[r]; ok {
					row = append(row, fmt.Sprintf("%.2fx", v))
				} else {
					row = append(row, "-")
				}
			}
			rows = append(rows, row)
		}
	}
	return rows
}

const legend = "Medians over the repetitions; ↑ higher is better, ↓ lower is better; " +
	"\"a/b\" = median(a) / median(b) from the same run (kern = kernel, dock = docker, xdpg = xdp-generic)."

// observeLegend replaces legend under -observe.
const observeLegend = "Medians over the repetitions; ↑ higher is better, ↓ lower is better; " +
	"\"a/b\" = the median over the repetitions of a's sample / b's sample of the same repetition, " +
	"(min–max) of those per-repetition ratios. tc+aa/tc is the A/A control: two identical tc setups, so its " +
	"spread is what this run can resolve."

func legendText() string {
	if observing {
		return observeLegend
	}
	return legend
}
func header(w io.Writer, rep *Report, md bool) {
	li := "  "
	if md {
		li = "- "
	}
	m := rep.Machine
	fmt.Fprintf(w, "%smachine: kernel %s, nproc %d, CPU %s, loadavg at start %s, at end %s\n", li, m.Kernel, m.NProc, m.CPUModel, m.LoadStart, m.LoadEnd)
	dirty := ""
	if m.GitDirty > 0 {
		dirty = fmt.Sprintf(" + %d modified files", m.GitDirty)
	}
	fmt.Fprintf(w, "%sxlane built from the working tree (HEAD %s%s) with %s; %s; %s\n", li, m.GitCommit, dirty, m.GoVersion, m.Iperf3, m.Sockperf)
	c := rep.Config
	fmt.Fprintf(w, "%srun: %d repetition(s), %s per measurement, order %s\n", li, c.Repetitions, c.Duration, c.Order)
	fmt.Fprintf(w, "%sCPU: %s\n", li, c.CPUMethod)
	fmt.Fprintf(w, "%spinning: %s\n", li, c.Pinning)
	if c.RateMethod != "" {
		fmt.Fprintf(w, "%srate: %s\n", li, c.RateMethod)
	}
	for _, t := range rep.Topologies {
		fmt.Fprintf(w, "%s%s: %s\n", li, t.Mode, t.Describe)
	}
}

// printTable writes the text report.
func printTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\nxlane datapath modes benchmark, %s\n", rep.Started.UTC().Format(time.RFC3339))
	header(w, rep, false)
	fmt.Fprintln(w)
	rows := tableRows(rep)
	// Numbers align right; pad the two label columns to align them left.
	w0, w1 := 0, 0
	for _, row := range rows {
		w0, w1 = max(w0, utf8.RuneCountInString(row[0])), max(w1, utf8.RuneCountInString(row[1]))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, row := range rows {
		fmt.Fprintf(tw, "%-*s\t%-*s\t%s\t\n", w0, row[0], w1, row[1], strings.Join(row[2:], "\t"))
	}
	tw.Flush()
	fmt.Fprintln(w, "\n"+legendText())
	if rep.ProgRun != nil {
		fmt.Fprintln(w, "\nPer packet, BPF_PROG_RUN of xlane_from_endpoint (progrun.go):")
		for _, l := range progRunLines(rep.ProgRun, false) {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if len(rep.Verdicts) > 0 {
		fmt.Fprintln(w, "\nTargets (docs/benchmarks.md, Deciding the targets):")
		for _, l := range verdictLines(rep.Verdicts) {
			fmt.Fprintln(w, "  - "+l)
		}
	}
	if len(rep.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range rep.Notes {
			fmt.Fprintln(w, "  - "+n)
		}
	}
}

// writeMarkdown writes the markdown report.
func writeMarkdown(path string, rep *Report) error {
	var b strings.Builder
	title, cmd := "datapath modes benchmark", "go run ./bench/modes"
	if observing {
		title, cmd = "observability cost benchmark (tc path)", "go run ./bench/modes -observe"
	}
	fmt.Fprintf(&b, "# xlane %s\n\n%s, container to container on one node. Generated by `%s`.\n\n",
		title, rep.Started.UTC().Format(time.RFC3339), cmd)
	b.WriteString("![chart](" + reportName + "-latest.svg)\n\n")
	header(&b, rep, true)
	b.WriteString("\n")
	rows := tableRows(rep)
	for i, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		if i == 0 {
			b.WriteString("|---|---|" + strings.Repeat("---:|", len(row)-2) + "\n")
		}
	}
	b.WriteString("\n" + legendText() + "\n")
	if rep.ProgRun != nil {
		b.WriteString("\n## Per packet: BPF_PROG_RUN of xlane_from_endpoint\n\n")
		for _, l := range progRunLines(rep.ProgRun, true) {
			b.WriteString(l + "\n")
		}
	}
	if len(rep.Verdicts) > 0 {
		b.WriteString("\n## Targets\n\nJudged as [benchmarks.md](../../docs/observability.md#how-the-cost-targets-are-decided) says, against observability off (tc+off, BPF_PROG_RUN off): " +
			"end to end, cost = the median of the per-repetition costs, resolved where the A/A control's largest per-repetition |cost| on the same row is below the target; " +
			"BPF_PROG_RUN, cost = the median over the rounds of the per-packet difference divided by the path's CPU per packet of the same run, " +
			"resolved where the p10–p90 band of its own A/A (on loaded twice) is within the target.\n\n")
		for _, l := range verdictLines(rep.Verdicts) {
			b.WriteString("- " + l + "\n")
		}
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range rep.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeReports writes modes-<date>.json, modes-latest.md and
// modes-latest.svg to dir and returns their paths.
func writeReports(dir string, rep *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	jp := filepath.Join(dir, reportName+"-"+rep.Started.UTC().Format("2006-01-02T150405Z")+".json")
	if err := os.WriteFile(jp, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	mp := filepath.Join(dir, reportName+"-latest.md")
	if err := writeMarkdown(mp, rep); err != nil {
		return nil, err
	}
	sp := filepath.Join(dir, reportName+"-latest.svg")
	if err := os.WriteFile(sp, []byte(chartSVG(rep)), 0o644); err != nil {
		return nil, err
	}
	return []string{jp, mp, sp}, nil
}
