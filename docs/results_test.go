package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxBenchmarksLines bounds docs/benchmarks.md (issue 27): a reference of
// one current table per area; the dated history belongs in bench/results.
const maxBenchmarksLines = 600

// TestBenchmarksIsAReference fails when docs/benchmarks.md grows past
// maxBenchmarksLines: move the run's story to the notebook in bench/results
// and keep only the current figures here.
func TestBenchmarksIsAReference(t *testing.T) {
	b, err := os.ReadFile("benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxBenchmarksLines {
		t.Errorf("benchmarks.md: %d lines, more than %d: the dated history goes to bench/results (notebook, CHANGELOG.md)", n, maxBenchmarksLines)
	}
}

// TestResultsLinks fails when a Markdown file in bench/results (the
// notebook, the changelog, a generated report) links to a file or heading
// that does not exist: observe-latest.md links to the targets' rules in
// docs/benchmarks.md, the notebook to the docs it moved away from.
func TestResultsLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	const dir = "bench/results"
	docs, err := filepath.Glob(filepath.Join(root, dir, "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no %s/*.md (%v)", dir, err)
	}
	for _, path := range docs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := filepath.Base(path)
		for _, m := range linkRE.FindAllStringSubmatch(stripFences(string(b)), -1) {
			if msg := checkLink(root, dir, doc, m[1]); msg != "" {
				t.Errorf("%s/%s: link %s: %s", dir, doc, m[1], msg)
			}
		}
	}
}
