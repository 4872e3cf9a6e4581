package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// sampleOf always keeps the last item (the newest Service) and never
// repeats one.
func TestSampleOf(t *testing.T) {
	var xs []string
	for i := range 1000 {
		xs = append(xs, fmt.Sprint(i))
	}
	got := sampleOf(xs, 50)
	if len(got) != 50 || got[0] != "999" {
		t.Fatalf("sample %v: want 50 items, the last one first", got)
	}
	seen := map[string]bool{}
	for _, g := range got {
		if seen[g] {
			t.Fatalf("%s twice in %v", g, got)
		}
		seen[g] = true
	}
	if got := sampleOf(xs[:3], 50); !slices.Equal(got, xs[:3]) {
		t.Fatalf("fewer than n: %v, want all", got)
	}
}

// Nearest-rank percentiles: p99 of fewer than 100 samples is the largest.
func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ p, want float64 }{{50, 3}, {99, 5}, {0, 1}, {20, 1}, {21, 2}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("p%v of %v: %v, want %v", c.p, xs, got, c.want)
		}
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("no samples: want NaN")
	}
}

// Bad flags are refused, naming the flag.
func TestParseFlags(t *testing.T) {
	for _, c := range []struct{ args, flag string }{
		{"-levels 1000,10", "-levels"}, {"-modes xlane,bogus", "-modes"}, {"-changes 0", "-changes"},
		{"-sample 0", "-sample"}, {"-workers 0", "-workers"}, {"-conc 0", "-conc"}, {"-reps 0", "-reps"},
	} {
		_, err := parseFlags(strings.Fields(c.args))
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: %v, want an error naming %s", c.args, err, c.flag)
		}
	}
	o, err := parseFlags([]string{"-quick"})
	if err != nil || !slices.Equal(o.levels, []int{1, 1000}) || o.changes != 5 || o.Reps != 1 {
		t.Fatalf("-quick: %+v, %v", o, err)
	}
}
