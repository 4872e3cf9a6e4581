package harness

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseLevels(t *testing.T) {
	got, err := ParseLevels("1, 1000,10000", 40000, true)
	if err != nil || !slices.Equal(got, []int{1, 1000, 10000}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, c := range []struct {
		in      string
		growing bool
	}{{"0", false}, {"40001", false}, {"x", false}, {"", false}, {"10,10", true}, {"10,5", true}} {
		if _, err := ParseLevels(c.in, 40000, c.growing); err == nil || !strings.Contains(err.Error(), "-levels") {
			t.Errorf("%q (growing %v): %v, want an error naming -levels", c.in, c.growing, err)
		}
	}
	if _, err := ParseLevels("10,5", 40000, false); err != nil {
		t.Errorf("any order when not growing: %v", err)
	}
}

// -quick fills only what the command line left alone.
func TestQuickDefaults(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	reps := fs.Int("reps", 3, "")
	dur := fs.String("duration", "5s", "")
	if err := fs.Parse([]string{"-reps", "7"}); err != nil {
		t.Fatal(err)
	}
	if err := QuickDefaults(fs, map[string]string{"reps": "1", "duration": "1s"}); err != nil {
		t.Fatal(err)
	}
	if *reps != 7 || *dur != "1s" {
		t.Fatalf("reps %d duration %s, want 7 and 1s", *reps, *dur)
	}
	if err := QuickDefaults(fs, map[string]string{"nope": "1"}); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
}

// RunFlags: -quick fills what the command line left alone, defaults come
// from the usage.
func TestRunFlags(t *testing.T) {
	var r RunFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	r.Register(fs, RunFlagsUsage{DefaultDuration: 5 * time.Second, DefaultOut: "out"})
	if err := r.Parse(fs, []string{"-quick", "-reps", "4"}, map[string]string{"reps": "1", "duration": "2s"}); err != nil {
		t.Fatal(err)
	}
	if r.Reps != 4 || r.Duration != 2*time.Second || r.Out != "out" || r.KeepTmp {
		t.Fatalf("got %+v", r)
	}
}
