package metrics

import (
	"encoding/json"
	"github.com/xlane-dev/xlane/internal/version"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/observability.md's table under "## Metrics" lists exactly the
// metrics of names.go, each with its type and labels.
func TestDocListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/observability.md: no ## Metrics section")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	row := regexp.MustCompile("(?m)^\\| `(xlane_[a-z_]+)` \\| ([a-z]+) \\|\\s*([a-z_, ]*?)\\s*\\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		name, typ := m[1], m[2]
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		documented[name] = true
		i := slices.IndexFunc(All, func(x Metric) bool { return x.Name == name })
		if i < 0 {
			t.Errorf("docs/observability.md lists %s, which names.go does not define", name)
			continue
		}
		if string(All[i].Type) != typ {
			t.Errorf("%s: documented as a %s, names.go says %s", name, typ, All[i].Type)
		}
		if !slices.Equal(labels, All[i].Labels) {
			t.Errorf("%s: documented labels %v, names.go says %v", name, labels, All[i].Labels)
		}
	}
	for _, m := range All {
		if !documented[m.Name] {
			t.Errorf("%s (names.go) is not in docs/observability.md's ## Metrics table", m.Name)
		}
	}
}

// Every query of the Grafana dashboard names metrics that exist: one of
// names.go (a histogram's or summary's _bucket, _sum, _count included) or
// one the Go runtime and process collectors register.
func TestDashboardQueriesExist(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/xlane-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/xlane-dashboard.json: %v", err)
	}
	exists := map[string]bool{}
	for _, m := range All {
		exists[m.Name] = true
		switch m.Type {
		case Histogram:
			exists[m.Name+"_bucket"], exists[m.Name+"_sum"], exists[m.Name+"_count"] = true, true, true
		case Summary:
			exists[m.Name+"_sum"], exists[m.Name+"_count"] = true, true
		}
	}
	mfs, err := New(&fakeSource{s: full()}, version.Info{Version: "test"}, quiet()).Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		exists[mf.GetName()] = true
	}
	ident := regexp.MustCompile(`\b(?:xlane|go|process)_[a-zA-Z0-9_]+`)
	check := func(where, expr string) {
		names := ident.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, expr)
		}
		for _, n := range names {
			if !exists[n] {
				t.Errorf("%s: %q: no metric %s", where, expr, n)
			}
		}
	}
	if len(dash.Panels) == 0 {
		t.Fatal("dashboard has no panels")
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
			for _, n := range ident.FindAllString(tg.Expr, -1) {
				used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
			}
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok && strings.Contains(q, "label_values(") {
			check("variable", q)
		}
	}
	for _, m := range All {
		if !used[m.Name] {
			t.Errorf("%s is on no panel of the dashboard", m.Name)
		}
	}
}
