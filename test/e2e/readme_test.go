package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/accel"
)

// readmeBlock is the README's "Using it" block: the ```sh fence under the
// "## Using it" heading.
func readmeBlock(t *testing.T, readme string) string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Using it\n")
	if !ok {
		t.Fatal("README.md: no ## Using it section")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	_, block, ok := strings.Cut(sec, "\n```sh\n")
	if !ok {
		t.Fatal("README.md: ## Using it has no ```sh block")
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatal("README.md: ## Using it: the ```sh block does not end")
	}
	return block + "\n"
}

// TestReadmeUsing runs the README's "Using it" block, as written, with
// bash -e: every line must succeed, in order. It stands for a fresh
// machine: a network namespace of its own (only lo, up), a private mount
// namespace where /run (netns names, the API socket, the Docker plugin
// socket) and /sys/fs/bpf are empty mounts of their own, /var/lib an
// overlay without /var/lib/xlane, and a cgroup namespace rooted at a
// cgroup of the test's (its cgroup2 mounted anew), so xlaned's defaults, the block's names (c1, wan, ...)
// and xlane's cgroup collide with nothing else on the machine. The
// block's last lines clean up: afterwards the namespace holds nothing but
// lo. Whatever happens, the cgroup's processes are killed (cgroup.kill)
// and the namespaces go with them.
func TestReadmeUsing(t *testing.T) {
	skipInMatrixGuest(t, "the block runs make build")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "using-it.sh")
	if err := os.WriteFile(script, []byte(readmeBlock(t, filepath.Join(root, "README.md"))), 0o644); err != nil {
		t.Fatal(err)
	}
	netns := newNetns(t, "readme")
	runIn(t, netns, "ip", "link", "set", "lo", "up")
	cg2, err := accel.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	cg := newCgroup(t, "")
	t.Cleanup(func() { killCgroup(t, cg) }) // runs before newCgroup's removal
	// /var/lib as an overlay whose writes land here, without the
	// machine's /var/lib/xlane (removed in the overlay only): xlaned's
	// default state starts empty, and make build still finds dpkg.
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(filepath.Join(dir, "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	setup := `set -e
mount -t tmpfs tmpfs /run
mount -t overlay overlay -o lowerdir=/var/lib,upperdir="$4/upper",workdir="$4/work" /var/lib
rm -rf /var/lib/xlane
mount -t bpf bpf /sys/fs/bpf
umount -l "$1"; mount -t cgroup2 cgroup2 "$1"
cd "$2"
exec bash -ex "$3"
`
	// The shell moves itself into cg, then enters the namespaces: the
	// cgroup namespace is rooted where unshare runs.
	// Output to a file: xlaned, started in the background by the block,
	// would hold a pipe open after a failed line ends bash.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`, "sh", cg,
		"nsenter", "--net="+nsPath(netns), "--", "unshare", "--mount", "--propagation", "private", "--cgroup", "--",
		"bash", "-c", setup, "setup", cg2, root, script, dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	out, _ := os.ReadFile(logf.Name())
	if err != nil {
		t.Fatalf("README.md's Using it block failed: %v\n%s", err, out)
	}
	t.Logf("README.md's Using it block:\n%s", out)
	// Its cleanup lines left nothing in the namespace.
	if links := runIn(t, netns, "ip", "-o", "link", "show"); strings.Count(links, "\n") != 1 || !strings.Contains(links, ": lo:") {
		t.Errorf("after the block, links besides lo:\n%s", links)
	}
	for _, fam := range []string{"-4", "-6"} {
		if r := runIn(t, netns, "ip", fam, "route", "show", "table", "all"); strings.Contains(r, "10.10.") || strings.Contains(r, "fd00:10:") || strings.Contains(r, "10.30.") {
			t.Errorf("after the block, routes of its networks (ip %s route show table all):\n%s", fam, r)
		}
	}
	if a := runIn(t, netns, "ip", "-o", "addr", "show", "dev", "lo"); strings.Contains(a, "10.10.") || strings.Contains(a, "10.30.") {
		t.Errorf("after the block, gateway addresses left on lo:\n%s", a)
	}
}

// killCgroup kills every process in cg and below (cgroup.kill) and waits
// for them to be gone, then removes the cgroups below cg, deepest first.
func killCgroup(t *testing.T, cg string) {
	os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0)
	for range 100 {
		b, _ := os.ReadFile(filepath.Join(cg, "cgroup.events"))
		if strings.Contains(string(b), "populated 0") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var dirs []string
	filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != cg {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove cgroup %s: %v", dirs[i], err)
		}
	}
}
