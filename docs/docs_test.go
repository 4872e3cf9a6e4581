// Package docs holds the project's documentation (the *.md files here) and
// a test that keeps it pointing at things that exist.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documents checked: the README and everything in docs/.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	return append([]string{"../README.md"}, docs...)
}

var (
	// [text](target), not an image's alt text; the target up to a space
	// (a title) or the closing parenthesis.
	linkRE = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)[^)]*\)`)
	// `code span`s, where the docs name files and directories.
	codeRE = regexp.MustCompile("`([^`\n]+)`")
	// A repository path in running text: a top-level directory and more.
	pathRE = regexp.MustCompile(`(?:^|[\s(\[,;"'])((?:\.\./)?(?:bpf|internal|cmd|bench|docs|scripts|test)/[A-Za-z0-9_.*/-]*)`)
	// A path from the top of the repository.
	topDirRE = regexp.MustCompile(`^(?:bpf|internal|cmd|bench|docs|scripts|test)/`)
	// The extensions that make a bare name (`csum.h`) a file of the repo.
	fileExt = []string{".go", ".c", ".h", ".sh", ".md", ".json", ".txt", ".svg", ".o"}
)

// TestLinksAndPaths fails when README.md or a docs/*.md file links to a
// file or heading that does not exist, or names a repository path (in
// running text or a code span) that does not exist: a file moved or
// renamed must take its mentions along.
func TestLinksAndPaths(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	names := repoFileNames(t, root)
	for _, doc := range documents(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := stripFences(string(b))
		rel, _ := filepath.Rel(root, filepath.Join(root, "docs", doc))
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			if err := checkLink(root, filepath.Dir(filepath.Join("docs", doc)), doc, m[1]); err != "" {
				t.Errorf("%s: link %s: %s", rel, m[1], err)
			}
		}
		for _, p := range mentionedPaths(text) {
			if strings.HasPrefix(p, "../") { // a link's target, from the document's directory
				p = filepath.Join(filepath.Dir(rel), p)
			}
			if !pathExists(root, p) {
				t.Errorf("%s: %q: no such path in the repository", rel, p)
			}
		}
		for _, m := range codeRE.FindAllStringSubmatch(text, -1) {
			if msg := checkCodeSpan(root, rel, m[1], names); msg != "" {
				t.Errorf("%s: `%s`: %s", rel, m[1], msg)
			}
		}
	}
}

// checkCodeSpan checks a code span of doc (rel, from the top of the
// repository) that names a file or directory: relative to the document
// when it starts with ./ or ../, from the top when it starts with a
// top-level directory or has a slash and a file extension; a bare file
// name (`csum.h`) must be the name of some file. A placeholder
// (`fw-<date>.json`) makes the rest a glob. Commands (with spaces),
// absolute paths of the machine (/proc/net/snmp) and anything else are
// not paths of the repository.
func checkCodeSpan(root, rel, span string, names map[string]bool) string {
	if strings.ContainsAny(span, " $") || strings.HasPrefix(span, "/") {
		return ""
	}
	p := span
	if i := strings.IndexAny(p, "<"); i >= 0 {
		p = p[:i] + "*"
	}
	ext := slices.Contains(fileExt, filepath.Ext(p))
	switch {
	case strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../"):
		p = filepath.Join(filepath.Dir(rel), p)
	case topDirRE.MatchString(p) || strings.Contains(p, "/") && ext:
	case !strings.Contains(p, "/") && ext && !strings.Contains(p, "*"):
		if !names[p] {
			return "no file of that name in the repository"
		}
		return ""
	default:
		return ""
	}
	if !pathExists(root, p) {
		return "no such path in the repository"
	}
	return ""
}

// checkLink checks one link target of doc (in dir, relative to root):
// external links are not fetched; a file must exist in the repository,
// and a #fragment must be a heading of the linked (or same) document.
func checkLink(root, dir, doc, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, frag, _ := strings.Cut(target, "#")
	path := filepath.Join(root, dir, doc)
	if file != "" {
		path = filepath.Join(root, dir, file)
		if !inside(root, path) {
			return "points outside the repository"
		}
		if _, err := os.Stat(path); err != nil {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "fragment of a file that cannot be read: " + err.Error()
	}
	if !slices.Contains(headingSlugs(string(b)), frag) {
		return "no heading #" + frag
	}
	return ""
}

// mentionedPaths lists the repository paths a document names. A path cut
// by a placeholder (`fw-<date>.json`, `netkit-DATE.txt`) ends in '*', so it
// is checked as a glob: something must match the part before it.
func mentionedPaths(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		for _, m := range pathRE.FindAllStringSubmatchIndex(line, -1) {
			p := strings.TrimRight(line[m[2]:m[3]], ".,;:")
			if m[3] < len(line) && line[m[3]] == '<' || strings.HasSuffix(p, "-") {
				p += "*"
			}
			out = append(out, p)
		}
	}
	return out
}

// pathExists reports whether p names something in the repository: a file,
// a directory, or (with * in it) a glob that matches.
func pathExists(root, p string) bool {
	full := filepath.Join(root, p)
	if !inside(root, full) {
		return false
	}
	if strings.Contains(p, "*") {
		m, _ := filepath.Glob(full)
		return len(m) > 0
	}
	_, err := os.Stat(full)
	return err == nil
}

func inside(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// repoFileNames is the set of base names of the files in the repository
// (outside .git), for bare file names in code spans.
func repoFileNames(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		names[d.Name()] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// stripFences drops fenced code blocks: shell sessions and program output
// name files of the machine, not of the repository.
func stripFences(s string) string {
	var out []string
	fenced := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// headingSlugs are the anchors GitHub gives a document's headings:
// lower case, punctuation but '-' and '_' dropped, spaces to '-',
// repeated headings numbered.
func headingSlugs(doc string) []string {
	var slugs []string
	seen := map[string]int{}
	for _, l := range strings.Split(stripFences(doc), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && unicode.IsLetter(r):
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			slugs = append(slugs, s+"-"+strconv.Itoa(n))
		} else {
			slugs = append(slugs, s)
		}
		seen[s]++
	}
	return slugs
}
