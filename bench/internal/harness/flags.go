package harness

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
