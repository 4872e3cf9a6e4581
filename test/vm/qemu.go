package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cmd is one command to run in a guest.
type Cmd struct {
	Path string   // host path of the (static) binary; copied into the guest
	Args []string // arguments after the program name
	Dir  string   // working directory in the guest (host tree, read-only)
	Env  []string // KEY=VALUE, the whole environment of the command
	// Stdout gets the command's stdout and stderr, streamed.
	Stdout io.Writer
	// Console gets the guest's kernel console when the guest fails
	// (no exit status came back).
	Console io.Writer
	CPUs    int // default 2
	MemMB   int // default 2048
	// QEMUArgs are added to QEMU's command line: a network device for a
	// guest that should have one (the guest has none otherwise).
	QEMUArgs []string
	// Netns, when set, is the network namespace (a path) QEMU runs in:
	// where the tap that QEMUArgs name lives.
	Netns string
	// QEMU is the qemu-system-x86_64 to run (default: the one in PATH),
	// e.g. the build with af-xdp of scripts/qemu-afxdp.sh.
	QEMU string
}

// ErrNoStatus means the guest stopped without the command's exit status:
// it crashed, panicked or timed out. The console log says which.
var ErrNoStatus = errors.New("guest returned no exit status")

// Run boots img, runs c in it and returns the command's exit status. QEMU is
// killed (by pid) when ctx ends (the error wraps context.Cause) or when
// this process dies. The guest's work dir is removed on return, or by a
// later Run if this process dies first (workdir.go).
func Run(ctx context.Context, img *Image, c Cmd) (int, error) {
	if c.CPUs == 0 {
		c.CPUs = 2
	}
	if c.MemMB == 0 {
		c.MemMB = 2048
	}
	sweepWorkDirs("") // what runs killed before their cleanup left (workdir.go)
	out, err := newWorkDir("")
	if err != nil {
		return -1, err
	}
	defer os.RemoveAll(out)
	if err := copyFile(c.Path, filepath.Join(out, "cmd.bin")); err != nil {
		return -1, err
	}
	if err := os.WriteFile(filepath.Join(out, "run.sh"), []byte(runScript(c)), 0o755); err != nil {
		return -1, err
	}
	if err := os.WriteFile(filepath.Join(out, "keep"), []byte(keepPaths(c)), 0o644); err != nil {
		return -1, err
	}
	outputPath := filepath.Join(out, "output")
	if err := os.WriteFile(outputPath, nil, 0o666); err != nil {
		return -1, err
	}
	console := filepath.Join(out, "console.log")
	// One host thread runs every vCPU (thread=single), not one thread
	// each (MTTCG). Under MTTCG a 6.12 guest panicked in CI (2026-11-22):
	// "Fatal exception in interrupt" with RIP one byte into the 5-byte NOP
	// of a static branch at the top of __netif_receive_skb_core: by that
	// evidence (not proven further) a CPU ran a jump label while another
	// CPU was patching it (ping's SO_TIMESTAMP flips netstamp_needed_key;
	// XDP, tcx and cgroup attachments flip others). Real CPUs serialise
	// that cross-modification (text_poke_bp); QEMU 7.2's MTTCG seemingly
	// did not here.
	// Round-robin vCPUs cannot interleave inside an instruction. Cost:
	// the e2e selection on 6.12 took 309 s instead of 243 s.
	args := []string{
		"-machine", "q35", "-accel", "tcg,thread=single", "-cpu", "max",
		"-smp", strconv.Itoa(c.CPUs), "-m", strconv.Itoa(c.MemMB),
		"-nodefaults", "-display", "none", "-no-reboot", "-nic", "none",
		"-serial", "file:" + console,
		"-kernel", img.Vmlinux, "-initrd", img.Initrd,
		"-append", "console=ttyS0 quiet panic=-1 rdinit=/init",
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + out + ",mount_tag=out,security_model=none,multidevs=remap",
	}
	args = append(args, c.QEMUArgs...)
	qemu := c.QEMU
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	q := exec.Command(qemu, args...)
	if c.Netns != "" {
		q = exec.Command("nsenter", append([]string{"--net=" + c.Netns, "--", qemu}, args...)...)
	}
	var qerr strings.Builder
	q.Stdout, q.Stderr = &qerr, &qerr
	// The guest must not outlive us, whoever kills us. Pdeathsig fires
	// when the thread that started QEMU ends, not the process: that thread
	// stays ours until QEMU is gone, so that no other goroutine can lock
	// it and end it under a running guest (test code that enters
	// namespaces does that).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	q.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := q.Start(); err != nil {
		return -1, fmt.Errorf("start qemu (apt-get install qemu-system-x86): %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Wait() }()
	f, err := os.Open(outputPath)
	if err != nil {
		q.Process.Kill()
		<-done
		return -1, err
	}
	defer f.Close()
	var werr error
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case werr = <-done:
			break loop
		case <-ctx.Done():
			q.Process.Kill()
			<-done
			io.Copy(c.Stdout, f)
			dumpConsole(c.Console, console)
			return -1, fmt.Errorf("guest %s: %w", img.Kernel.Name, context.Cause(ctx))
		case <-tick.C:
			io.Copy(c.Stdout, f)
		}
	}
	io.Copy(c.Stdout, f)
	b, err := os.ReadFile(filepath.Join(out, "rc"))
	rc, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || rc == 125 {
		dumpConsole(c.Console, console)
		return -1, fmt.Errorf("guest %s (qemu: %v %s): %w", img.Kernel.Name, werr, strings.TrimSpace(qerr.String()), ErrNoStatus)
	}
	return rc, nil
}

func dumpConsole(w io.Writer, path string) {
	if w == nil {
		return
	}
	b, _ := os.ReadFile(path)
	fmt.Fprintf(w, "---- guest console ----\n%s---- end of guest console ----\n", b)
}

// runScript is what the guest's init runs in the chroot.
func runScript(c Cmd) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	if c.Dir != "" {
		fmt.Fprintf(&b, "cd %s || { echo 125 > /run/xlvm/rc; exit; }\n", shq(c.Dir))
	}
	b.WriteString("exec env -i")
	for _, kv := range c.Env {
		b.WriteString(" " + shq(kv))
	}
	b.WriteString(" /bin/sh -c '\"$@\" >>/run/xlvm/output 2>&1; echo $? > /run/xlvm/rc' xlvm /run/xlvm/cmd.bin")
	for _, a := range c.Args {
		b.WriteString(" " + shq(a))
	}
	b.WriteString("\n")
	return b.String()
}

// keepPaths lists, a line each, the host paths the guest must see although
// its init mounts tmpfs over their parent (/tmp, /run, /var/tmp, /root):
// the command's directory and absolute paths in its environment.
func keepPaths(c Cmd) string {
	var b strings.Builder
	add := func(p string) {
		if filepath.IsAbs(p) && !strings.ContainsAny(p, "\n") {
			b.WriteString(filepath.Clean(p) + "\n")
		}
	}
	add(c.Dir)
	for _, kv := range c.Env {
		if _, v, ok := strings.Cut(kv, "="); ok {
			for _, p := range filepath.SplitList(v) {
				add(p)
			}
		}
	}
	return b.String()
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
