package main

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestHelpExamples: xlaned --help shows examples, and every flag they use
// is one xlaned has.
func TestHelpExamples(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, args := os.Stderr, os.Args
	os.Stderr, os.Args = w, []string{"xlaned", "--help"}
	err = run()
	os.Stderr, os.Args = stderr, args
	w.Close()
	out, _ := io.ReadAll(r)
	if err != nil {
		t.Fatalf("xlaned --help: %v", err)
	}
	help := string(out)
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(help, -1) {
		flags[m[1]] = true
	}
	_, ex, ok := strings.Cut(help, "\nExamples:\n")
	if !ok || len(flags) < 10 {
		t.Fatalf("xlaned --help: no Examples section or no flags (%d):\n%s", len(flags), help)
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	n := 0
	for _, line := range strings.Split(ex, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "xlaned" {
			t.Errorf("example %q: not an xlaned command line", line)
			continue
		}
		n++
		for _, a := range f[1:] {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if strings.HasPrefix(a, "-") && !flags[name] {
				t.Errorf("example %q: xlaned has no flag %s", strings.TrimSpace(line), a)
			}
		}
	}
	if n < 3 {
		t.Errorf("%d examples", n)
	}
}
