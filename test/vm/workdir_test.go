package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startProc starts argv and ends it (by pid) when the test ends.
func startProc(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
	})
	return c
}

// The sweep removes the work dirs of dead owners (gone, or a pid now
// taken by a later process) and old owner-less ones that no process
// names, and leaves a live owner's, a fresh owner-less one, an old one a
// process still names, one it cannot judge, and anything not xlvm-*.
func TestSweepWorkDirs(t *testing.T) {
	root := t.TempDir()
	mk := func(name, owner string, age time.Duration) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if age > 0 {
			old := time.Now().Add(-age)
			if err := os.Chtimes(d, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	live, err := newWorkDir(root)
	if err != nil {
		t.Fatal(err)
	}
	me, err := owner(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(live, ownerFile)); strings.TrimSpace(string(b)) != me {
		t.Fatalf("owner file %q, want %q", b, me)
	}
	// A process that has ended: its owner string read while it ran.
	p := startProc(t, "sleep", "60")
	deadOwner, err := owner(p.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	p.Process.Kill()
	p.Wait()
	dead := mk("xlvm-dead", deadOwner, 0)
	// Our pid with another start time: a dead owner whose pid was reused.
	reused := mk("xlvm-reused", strconv.Itoa(os.Getpid())+" 1", 0)
	fresh := mk("xlvm-fresh", "", 0)
	stale := mk("xlvm-stale", "", time.Hour)
	served := mk("xlvm-served", "", time.Hour)
	startProc(t, "/bin/sh", "-c", "sleep 60; :", "x", "id=x,path="+served+",ro")
	bad := mk("xlvm-bad", "not a pid", time.Hour)
	other := mk("other-dead", deadOwner, time.Hour)

	got := sweepWorkDirs(root)
	slices.Sort(got)
	if want := []string{dead, reused, stale}; !slices.Equal(got, want) {
		t.Errorf("swept %q, want %q", got, want)
	}
	for _, d := range []string{dead, reused, stale} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s still there", d)
		}
	}
	for _, d := range []string{live, fresh, served, bad, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
