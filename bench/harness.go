package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// runHarness runs one benchmark the way every `go run ./bench …` command
// does: the first SIGINT/SIGTERM/SIGHUP cancels the run and teardown still
// runs (later signals are swallowed so it can finish); a temp dir, kept
// with keepTmp; the cleanup stack run on the way out, whose failure fails
// the run; and a line saying how it failed. Exit code: 0, or 1.
func runHarness(name string, keepTmp bool, run func(ctx context.Context, tmp string, cleanup *undoStack) error) (code int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			log.Printf("%v: stopping, cleaning up (please wait)", s)
			cancel()
		}
	}()
	var cleanup undoStack
	defer func() {
		if err := cleanup.run(); err != nil {
			log.Printf("cleanup: %v", err)
			code = 1
		}
	}()
	tmp, err := os.MkdirTemp("", "xlane-bench-"+name)
	if err != nil {
		log.Print(err)
		return 1
	}
	cleanup.push("remove "+tmp, func(context.Context) error {
		if keepTmp {
			log.Printf("kept %s", tmp)
			return nil
		}
		return os.RemoveAll(tmp)
	})
	if err := run(ctx, tmp, &cleanup); err != nil {
		if ctx.Err() != nil {
			log.Printf("interrupted: %v", err)
		} else {
			log.Printf("FAILED: %v (rerun with -keep-tmp -v for daemon and server logs)", err)
		}
		return 1
	}
	return 0
}

// writeResults writes files (name -> content) into dir and says where.
func writeResults(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var names []string
	var errs []error
	for name, b := range files {
		p := filepath.Join(dir, name)
		errs = append(errs, os.WriteFile(p, b, 0o644))
		names = append(names, p)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	sort.Strings(names)
	fmt.Printf("\nresults: %s\n", strings.Join(names, ", "))
	return nil
}

// parseChoices parses a comma-separated -flag value: each item one of
// allowed, at most once, in the order given.
// quickDefaults gives the flags of fs that the command line did not set
// the values of a -quick run (flag name → value), after fs.Parse.
func quickDefaults(fs *flag.FlagSet, vals map[string]string) error {
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

// parseLevels parses a -levels list of counts from 1 to max, in run order;
// growing: each larger than the one before.
func parseLevels(value string, max int, growing bool) ([]int, error) {
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

func parseChoices(flagName, value string, allowed []string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); !slices.Contains(allowed, v) || slices.Contains(out, v) {
			return nil, fmt.Errorf("-%s: %q: want each of %s at most once", flagName, v, strings.Join(allowed, ", "))
		}
		out = append(out, v)
	}
	return out, nil
}
