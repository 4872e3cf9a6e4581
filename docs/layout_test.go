package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeLayoutNamesEverything fails when README.md's "Layout" section
// does not name a Go package of cmd/, internal/ or test/, or a BPF entry
// file of bpf/: a package or attach point added must be placed on the map
// newcomers read first.
func TestReadmeLayoutNamesEverything(t *testing.T) {
	layout := readmeSection(t, "## Layout")
	named := map[string]bool{}
	for _, m := range codeRE.FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}
	for _, top := range []string{"cmd", "internal", "test"} {
		err := filepath.WalkDir(filepath.Join("..", top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if !hasGoSource(t, p) {
				return nil
			}
			rel := strings.TrimPrefix(filepath.ToSlash(p), "../")
			if !named[rel] {
				t.Errorf("README.md Layout does not name package `%s`", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	entries, err := filepath.Glob("../bpf/*.c")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no bpf/*.c (%v)", err)
	}
	for _, e := range entries {
		if name := filepath.Base(e); !named[name] {
			t.Errorf("README.md Layout does not name BPF entry file `%s`", name)
		}
	}
}

// readmeSection is README.md's section under heading line head; a
// missing one fails the test.
func readmeSection(t *testing.T, head string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := section(string(b), head)
	if text == "" {
		t.Fatalf("README.md has no %q section", head)
	}
	return text
}

// section returns the text of the markdown section that starts with the
// heading line head, up to the next heading of the same level.
func section(text, head string) string {
	i := strings.Index(text, "\n"+head+"\n")
	if i < 0 {
		return ""
	}
	rest := text[i+len(head)+2:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// hasGoSource reports whether dir holds a non-test Go file (a package).
func hasGoSource(t *testing.T, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			return true
		}
	}
	return false
}

// TestEveryInternalPackageHasDoc fails when a package of internal/ has no
// doc.go that opens with "// Package NAME": the package's purpose is read
// in one place, the same place in every package.
func TestEveryInternalPackageHasDoc(t *testing.T) {
	err := filepath.WalkDir("../internal", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" || !hasGoSource(t, p) {
			return err
		}
		rel := strings.TrimPrefix(filepath.ToSlash(p), "../")
		b, err := os.ReadFile(filepath.Join(p, "doc.go"))
		if err != nil {
			t.Errorf("%s has no doc.go", rel)
			return nil
		}
		if want := "// Package " + filepath.Base(p) + " "; !strings.HasPrefix(string(b), want) {
			t.Errorf("%s/doc.go does not open with %q", rel, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWhereThingsAre fails when README.md's "Where things are" table does
// not answer a newcomer's first questions (issue 27), each with a file of
// the repository that exists: where the NAT stage is, where a drop reason
// is added, how a firewall rule becomes map entries, how a Kubernetes
// Service becomes a map entry, where a CNI ADD lands.
func TestWhereThingsAre(t *testing.T) {
	where := readmeSection(t, "## Where things are")
	for _, q := range []string{"NAT stage", "drop reason", "firewall rule", "Kubernetes Service", "CNI ADD"} {
		row := ""
		for _, l := range strings.Split(where, "\n") {
			if strings.HasPrefix(l, "| ") && strings.Contains(l, q) {
				row = l
			}
		}
		if row == "" {
			t.Errorf("README.md Where things are: no row asks about %q", q)
			continue
		}
		files := 0
		for _, m := range codeRE.FindAllStringSubmatch(row, -1) {
			p := m[1]
			if topDirRE.MatchString(p) && filepath.Ext(p) != "" {
				if _, err := os.Stat(filepath.Join("..", p)); err != nil {
					t.Errorf("README.md Where things are, %q: %s: %v", q, p, err)
				}
				files++
			}
		}
		if files == 0 {
			t.Errorf("README.md Where things are, %q: names no file", q)
		}
	}
}
