package vm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestModuleOrder(t *testing.T) {
	dep := filepath.Join(t.TempDir(), "modules.dep")
	os.WriteFile(dep, []byte(`kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/net/9p/9pnet.ko.xz: kernel/fs/netfs/netfs.ko.xz
kernel/fs/netfs/netfs.ko.xz:
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/drivers/net/veth.ko.xz:
`), 0o644)
	got, err := moduleOrder(dep, []string{"9pnet_virtio", "9p", "virtio_pci", "veth"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel/fs/netfs/netfs.ko.xz", "kernel/net/9p/9pnet.ko.xz", "kernel/net/9p/9pnet_virtio.ko.xz",
		"kernel/fs/9p/9p.ko.xz", "kernel/drivers/net/veth.ko.xz"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v (dependencies first, built-in virtio_pci skipped)", got, want)
	}
}

// The guest's run script must hand every argument and variable over
// verbatim, quotes and spaces included.
func TestRunScriptQuoting(t *testing.T) {
	dir := t.TempDir()
	script := runScript(Cmd{Dir: dir, Env: []string{"A=it's", "B=x y"}, Args: []string{"-x", "a b", `c'd`}})
	script = strings.ReplaceAll(script, "/run/xlvm/", dir+"/")
	os.WriteFile(filepath.Join(dir, "cmd.bin"), []byte("#!/bin/sh\nprintf '%s|' \"$A\" \"$B\" \"$@\"\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "run.sh"), []byte(script), 0o755)
	if out, err := exec.Command("/bin/sh", filepath.Join(dir, "run.sh")).CombinedOutput(); err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "output"))
	rc, _ := os.ReadFile(filepath.Join(dir, "rc"))
	if want := `it's|x y|-x|a b|c'd|`; string(out) != want || strings.TrimSpace(string(rc)) != "0" {
		t.Fatalf("output %q rc %q, want %q and 0", out, rc, want)
	}
}

func TestCpio(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("no busybox to read the archive back: scripts/deps.sh (make test) installs busybox-static")
	}
	var b bytes.Buffer
	w := newCpio(&b)
	w.dir("bin")
	w.file("bin/hello", 0o755, []byte("hello\n"))
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(bb, "cpio", "-idm")
	cmd.Dir, cmd.Stdin = dir, &b
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "bin/hello")); string(got) != "hello\n" {
		t.Fatalf("extracted %q", got)
	}
}

func TestKeepPaths(t *testing.T) {
	got := keepPaths(Cmd{Dir: "/tmp/ci/internal/bpf", Env: []string{"XLANE_E2E_BIN=/tmp/ci/bin/static", "PATH=/usr/bin:/root/go/bin", "X=relative", "EMPTY="}})
	want := "/tmp/ci/internal/bpf\n/tmp/ci/bin/static\n/usr/bin\n/root/go/bin\n"
	if got != want {
		t.Fatalf("keepPaths = %q, want %q", got, want)
	}
}
