package harness

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// QuickDefaults gives the flags of fs that the command line did not set
// the values of a -quick run (flag name → value), after fs.Parse.
func QuickDefaults(fs *flag.FlagSet, vals map[string]string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range vals {
		if set[name] {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("-quick: -%s=%s: %w", name, v, err)
		}
	}
	return nil
}

// ParseLevels parses a -levels list of counts from 1 to max, in run order;
// growing: each larger than the one before.
func ParseLevels(value string, max int, growing bool) ([]int, error) {
	var out []int
	for _, s := range strings.Split(value, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > max || (growing && len(out) > 0 && n <= out[len(out)-1]) {
			want := fmt.Sprintf("numbers from 1 to %d", max)
			if growing {
				want = "growing " + want
			}
			return nil, fmt.Errorf("-levels: %q: want %s", s, want)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseChoices parses a comma-separated -flag value: each item one of
// allowed, at most once, in the order given.
func ParseChoices(flagName, value string, allowed []string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); !slices.Contains(allowed, v) || slices.Contains(out, v) {
			return nil, fmt.Errorf("-%s: %q: want each of %s at most once", flagName, v, strings.Join(allowed, ", "))
		}
		out = append(out, v)
	}
	return out, nil
}

// RunFlags are the flags every benchmark has: -quick, -reps, -duration,
// -out, -keep-tmp and -v (Verbose).
type RunFlags struct {
	Quick    bool
	Reps     int // default 3
	Duration time.Duration
	Out      string
	KeepTmp  bool
}

// RunFlagsUsage is what one benchmark says of its RunFlags: the help
// text of each and the defaults that differ between benchmarks.
type RunFlagsUsage struct {
	Quick, Reps, Duration, Out, KeepTmp string
	DefaultDuration                     time.Duration
	DefaultOut                          string
}

// Register defines the flags in fs.
func (r *RunFlags) Register(fs *flag.FlagSet, u RunFlagsUsage) {
	fs.BoolVar(&r.Quick, "quick", false, u.Quick)
	fs.IntVar(&r.Reps, "reps", 3, u.Reps)
	fs.DurationVar(&r.Duration, "duration", u.DefaultDuration, u.Duration)
	fs.StringVar(&r.Out, "out", u.DefaultOut, u.Out)
	fs.BoolVar(&r.KeepTmp, "keep-tmp", false, u.KeepTmp)
	fs.BoolVar(&Verbose, "v", false, "log every command")
}

// Parse parses args into fs and, with -quick, gives the flags the command
// line did not set their quick values (QuickDefaults).
func (r *RunFlags) Parse(fs *flag.FlagSet, args []string, quick map[string]string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if r.Quick {
		return QuickDefaults(fs, quick)
	}
	return nil
}
