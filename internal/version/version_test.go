package version

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestGetFallsBackToVCS(t *testing.T) {
	vcs := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-29T09:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}, true
	}
	in := get("", "", "", vcs)
	if in.Version != "0123456789ab-dirty" || in.Commit != "0123456789abcdef0123456789abcdef01234567" || in.Date != "2026-11-29T09:00:00Z" {
		t.Errorf("VCS only: %+v", in)
	}
	in = get("v1.2.3", "abc", "2026-01-01T00:00:00Z", vcs)
	if in.Version != "v1.2.3" || in.Commit != "abc" || in.Date != "2026-01-01T00:00:00Z" || in.Modified {
		t.Errorf("stamped: %+v, want the stamp to win", in)
	}
	in = get("", "", "", func() (*debug.BuildInfo, bool) { return nil, false })
	if in.Version != "dev" || !strings.Contains(in.String(), "commit unknown") {
		t.Errorf("nothing known: %+v %q", in, in.String())
	}
}

// TestBinariesStamped builds the binaries with the Makefile's -ldflags
// and checks that each names the commit it was built from: xlane version,
// xlaned --version, xlane-cni --version.
func TestBinariesStamped(t *testing.T) {
	root, _ := filepath.Abs("../..")
	commit := git(t, root, "rev-parse", "HEAD")
	out, err := exec.Command("make", "-C", root, "-s", "print-ldflags").Output()
	if err != nil {
		t.Fatalf("make print-ldflags: %v", err)
	}
	ldflags := strings.TrimSpace(string(out))
	if !strings.Contains(ldflags, commit) {
		t.Fatalf("make print-ldflags = %q: no commit %s", ldflags, commit)
	}
	dir := t.TempDir()
	// One go build for the three: they share the compile.
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", dir+"/", "./cmd/xlane", "./cmd/xlaned", "./cmd/xlane-cni")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, b := range []struct {
		pkg  string
		args []string
	}{
		{"xlane", []string{"version", "--socket", filepath.Join(dir, "none.sock")}},
		{"xlaned", []string{"--version"}},
		{"xlane-cni", []string{"--version"}},
	} {
		got := runBin(filepath.Join(dir, b.pkg), b.args...)
		if !strings.Contains(got, commit) || strings.Contains(got, "dev ") {
			t.Errorf("%s %v: %q, want commit %s and no dev", b.pkg, b.args, got, commit)
		}
	}
}

// TestPlainBuildShowsCommit: a plain go build (no -ldflags) shows the
// commit from the toolchain's VCS stamp. Go stamps only where .git is a
// directory (not in a git worktree) and this machine's go env says
// -buildvcs=false, so the tree is copied into a fresh repository and built
// with -buildvcs=true.
func TestPlainBuildShowsCommit(t *testing.T) {
	root, _ := filepath.Abs("../..")
	files := git(t, root, "ls-files", "-co", "--exclude-standard")
	repo := t.TempDir()
	tar := exec.Command("sh", "-c", "tar -C \"$1\" -cf - -T - | tar -C \"$2\" -xf -", "sh", root, repo)
	tar.Stdin = strings.NewReader(files + "\n")
	if out, err := tar.CombinedOutput(); err != nil {
		t.Fatalf("copy the tree: %v\n%s", err, out)
	}
	git(t, repo, "init", "-q")
	git(t, repo, "add", "-A")
	git(t, repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t")
	commit := git(t, repo, "rev-parse", "HEAD")
	got := buildRun(t, repo, []string{"GOFLAGS=-buildvcs=true"}, "", "xlaned", "--version")
	if !strings.Contains(got, commit) || !strings.Contains(got, "xlaned "+commit[:12]) {
		t.Errorf("plain build: xlaned --version: %q, want version %s and commit %s", got, commit[:12], commit)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// buildRun builds ./cmd/pkg of root and returns what it prints when run
// with args.
func buildRun(t *testing.T, root string, env []string, ldflags, pkg string, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), pkg)
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/"+pkg)
	build.Dir = root
	build.Env = append(build.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return runBin(bin, args...)
}

// runBin is what bin prints when run with args (with no CNI_COMMAND).
func runBin(bin string, args ...string) string {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cmd.Environ(), "CNI_COMMAND=")
	out, _ := cmd.CombinedOutput()
	return string(out)
}
