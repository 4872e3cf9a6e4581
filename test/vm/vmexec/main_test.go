package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/test/vm"
)

// run is one vmexec running `sleep 300` in a guest, with its work dir.
type run struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	dir    string // $TMPDIR/xlvm-*
	qemu   int    // QEMU's pid
	done   chan error
}

// start runs vmexec in tmp (TMPDIR) and waits until its QEMU runs: the
// one work dir in tmp that others did not hold, with its owner file, and a
// process naming that dir on its command line.
func start(t *testing.T, bin, tmp string, others ...string) *run {
	t.Helper()
	r := &run{done: make(chan error, 1)}
	r.cmd = exec.Command(bin, "-kernel", vm.Kernels[len(vm.Kernels)-1].Name, "/bin/sleep", "300")
	r.cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
		if r.qemu > 0 {
			syscall.Kill(r.qemu, syscall.SIGKILL)
		}
	})
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		dirs, _ := filepath.Glob(filepath.Join(tmp, "xlvm-*"))
		for _, d := range dirs {
			if slices.Contains(others, d) {
				continue
			}
			if _, err := os.Stat(filepath.Join(d, "owner")); err != nil {
				continue
			}
			if pid := qemuOf(d); pid > 0 {
				r.dir, r.qemu = d, pid
				return r
			}
		}
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("vmexec ended before its guest started: %v\n%s", err, tail(r.stderr.String()))
		default:
		}
	}
	t.Fatalf("no QEMU on a new work dir in %s after 60 s\n%s", tmp, tail(r.stderr.String()))
	return nil
}

// tail is the end of a long stderr (a goroutine dump).
func tail(s string) string {
	if len(s) > 400 {
		return "..." + s[len(s)-400:]
	}
	return s
}

// qemuOf is the pid of the process whose command line shares dir
// (-virtfs local,path=DIR,...), 0 if none.
func qemuOf(dir string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte("path="+dir+",")) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// wait waits up to 30 s for vmexec to end and returns its exit status.
func (r *run) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("vmexec still runs 30 s after the signal\n%s", tail(r.stderr.String()))
		return -1
	}
}

// gone waits up to 10 s for pid to end.
func gone(pid int) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return true
		}
		// A zombie child of no one here: its cmdline is empty.
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && len(b) == 0 {
			return true
		}
	}
	return false
}

// A vmexec stopped by a signal, as a user or `go test` stops it (SIGQUIT
// and then SIGKILL past the timeout), leaves no guest and no work dir; a
// SIGKILLed one leaves a dir, which the next vmexec removes, while a
// vmexec running beside it keeps its own.
func TestSignalsCleanUp(t *testing.T) {
	if k := os.Getenv("XLANE_VM_KERNEL"); k != "" {
		t.Skipf("in the kernel matrix's %s guest: it can run no nested QEMU guest", k)
	}
	if _, err := vm.Fetch(vm.Kernels[len(vm.Kernels)-1], vm.DefaultCacheDir()); err != nil {
		t.Fatalf("guest kernel: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "vmexec")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build vmexec: %v\n%s", err, out)
	}
	tmp := t.TempDir()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP} {
		r := start(t, bin, tmp)
		r.cmd.Process.Signal(sig)
		if rc := r.wait(t); rc != 1 || !strings.Contains(r.stderr.String(), "stopped by signal \""+sig.String()+"\"") {
			t.Errorf("%v: exit %d, stderr %q; want 1 and the signal named", sig, rc, tail(r.stderr.String()))
		}
		if _, err := os.Stat(r.dir); err == nil {
			t.Errorf("%v: work dir %s left", sig, r.dir)
		}
		if !gone(r.qemu) {
			t.Errorf("%v: QEMU %d still runs", sig, r.qemu)
		}
	}

	k := start(t, bin, tmp)
	k.cmd.Process.Kill()
	k.wait(t)
	if !gone(k.qemu) {
		t.Errorf("SIGKILL: QEMU %d outlives vmexec", k.qemu)
	}
	if _, err := os.Stat(k.dir); err != nil {
		t.Fatalf("SIGKILL: work dir %s: %v; want it left for the next run to remove", k.dir, err)
	}
	live := start(t, bin, tmp, k.dir)
	next := start(t, bin, tmp, k.dir, live.dir)
	if _, err := os.Stat(k.dir); err == nil {
		t.Errorf("the next run left the dead run's work dir %s", k.dir)
	}
	if _, err := os.Stat(filepath.Join(live.dir, "owner")); err != nil {
		t.Errorf("the next run touched the live run's work dir %s: %v", live.dir, err)
	}
	for _, r := range []*run{live, next} {
		r.cmd.Process.Signal(syscall.SIGTERM)
		r.wait(t)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "xlvm-*")); len(left) != 0 {
		t.Errorf("work dirs left: %q", left)
	}
}
