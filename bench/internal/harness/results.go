package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// WriteResults writes files (name -> content) into dir and says where.
func WriteResults(dir string, files map[string][]byte) error {
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

// PrintResults prints a benchmark's markdown report md and, with dir set,
// writes it as <name>-latest.md and js as <name>-<started>.json there.
func PrintResults(dir, name string, started time.Time, md string, js []byte) error {
	fmt.Print("\n" + md)
	if dir == "" {
		return nil
	}
	stamp := started.UTC().Format("2006-01-02T150405Z")
	return WriteResults(dir, map[string][]byte{name + "-" + stamp + ".json": js, name + "-latest.md": []byte(md)})
}

// RunHeader opens a benchmark's JSON report: when and where it ran, with
// which options (embedded, so its fields stay at the top level).
type RunHeader struct {
	Started, Finished time.Time
	Kernel, CPU       string
	NProc             int
	LoadStart         string
	LoadEnd           string
	GitCommit         string
	Options           map[string]string
}
