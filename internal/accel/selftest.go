package accel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// childEnv marks the self-test's child process; its value is the
// JSON-encoded childOptions.
const childEnv = "XLANE_ACCEL_SELFTEST"

// Options tune SelfTest.
type Options struct {
	// Cases to run (nil: all, CaseNames).
	Cases []string `json:"cases,omitempty"`
	// LargeBytes is the size of the large-write case (0: 16 MiB; the e2e
	// test runs 64 MiB).
	LargeBytes int `json:"large_bytes,omitempty"`
	// Timeout per case: a case still running then has stalled (0: 5 s).
	CaseTimeout time.Duration `json:"case_timeout,omitempty"`
}

// CaseResult is one case's outcome.
type CaseResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Millis is how long it ran.
	Millis int64 `json:"ms"`
	// Redirected is how many bytes the fast path carried during it.
	Redirected uint64 `json:"redirected_bytes"`
}

// Report is what SelfTest found.
type Report struct {
	Kernel string       `json:"kernel"`
	At     time.Time    `json:"at"`
	Millis int64        `json:"ms"`
	Cases  []CaseResult `json:"cases"`
	// Error: the test itself could not run (nothing loaded, no cgroup2):
	// acceleration stays off.
	Error string `json:"error,omitempty"`
	// Counters of the throwaway copy after the run.
	Counters map[string]uint64 `json:"counters,omitempty"`
}

// Failed are the cases that failed, minus the ignored ones
// (IgnoredCases).
func (r *Report) Failed(ignored []string) []string {
	var f []string
	for _, c := range r.Cases {
		if !c.OK && !slices.Contains(ignored, c.Name) {
			f = append(f, c.Name)
		}
	}
	return f
}

// Passed says whether acceleration may be enabled: the test ran and no
// case failed but the ignored ones.
func (r *Report) Passed(ignored []string) bool {
	return r.Error == "" && len(r.Cases) > 0 && len(r.Failed(ignored)) == 0
}

// Unavailable is the reason acceleration is off on this kernel, for
// errors and status: "acceleration is unavailable on this kernel
// (6.18.0): self-test case splice failed: ...".
func (r *Report) Unavailable(ignored []string) string {
	if r.Error != "" {
		return fmt.Sprintf("acceleration is unavailable: the self-test on kernel %s could not run: %s", r.Kernel, r.Error)
	}
	f := r.Failed(ignored)
	word := "case"
	if len(f) > 1 {
		word = "cases"
	}
	return fmt.Sprintf("acceleration is unavailable on this kernel (%s): self-test %s %s failed; %s",
		r.Kernel, word, strings.Join(f, ", "), r.Summary(ignored))
}

// Summary is one line for logs and errors: "passed (13 cases, 812 ms)" or
// "failed: splice (copied 0 of 4194304 bytes), fionread (...)".
func (r *Report) Summary(ignored []string) string {
	if r.Error != "" {
		return "could not run: " + r.Error
	}
	var bad []string
	for _, c := range r.Cases {
		if !c.OK {
			s := c.Name + " (" + c.Error + ")"
			if slices.Contains(ignored, c.Name) {
				s += " [ignored: " + IgnoreCasesEnv + "]"
			}
			bad = append(bad, s)
		}
	}
	if len(bad) == 0 {
		return fmt.Sprintf("passed (%d cases, %d ms)", len(r.Cases), r.Millis)
	}
	verdict := "failed"
	if r.Passed(ignored) {
		verdict = "passed with ignored failures (tests only)"
	}
	return fmt.Sprintf("%s: %s (%d cases, %d ms)", verdict, strings.Join(bad, "; "), len(r.Cases), r.Millis)
}

// SelfTest runs the correctness cases on the live kernel with acceleration
// on, in a throwaway cgroup and network namespace, with a throwaway copy of
// the programs and maps. The running binary must call MaybeChild at start.
func SelfTest(ctx context.Context, o Options) *Report {
	start := time.Now()
	r := &Report{At: start.UTC(), Kernel: kernelRelease()}
	err := selfTest(ctx, o, r)
	r.Millis = time.Since(start).Milliseconds()
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func selfTest(ctx context.Context, o Options, r *Report) error {
	for _, c := range o.Cases {
		if !slices.Contains(CaseNames(), c) {
			return fmt.Errorf("no such case %q", c)
		}
	}
	objs, err := bpf.LoadAccel("")
	if err != nil {
		return err
	}
	defer objs.Close()
	root, err := Cgroup2Root()
	if err != nil {
		return err
	}
	removeStaleCgroups(root)
	cg, err := os.MkdirTemp(root, fmt.Sprintf("%s%d-", cgroupPrefix, os.Getpid()))
	if err != nil {
		return fmt.Errorf("create throwaway cgroup: %w", err)
	}
	defer os.Remove(cg) // empty once the child has exited
	if err := SetConfig(objs, true, nil, nil); err != nil {
		return err
	}
	if err := AttachMsg(objs); err != nil {
		return err
	}
	defer DetachMsg(objs)
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupSockOps, Program: objs.Sockops()})
	if err != nil {
		return fmt.Errorf("attach sockops to %s: %w", cg, err)
	}
	defer l.Close()

	cgfd, err := unix.Open(cg, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup %s: %w", cg, err)
	}
	defer unix.Close(cgfd)
	opt, _ := json.Marshal(o)
	// Every case has its own limit (the child reports a stall); this one
	// only ends a child that hangs as a whole.
	per := o.CaseTimeout
	if per == 0 {
		per = 5 * time.Second
	}
	timeout := time.Duration(len(cases)+1)*(per+time.Second) + 10*time.Second
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(cctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(opt))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	files, err := mapFiles(objs.Config(), objs.Stats(), objs.Socks())
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: unix.CLONE_NEWNET, UseCgroupFD: true, CgroupFD: cgfd,
		Pdeathsig: unix.SIGKILL}
	runErr := cmd.Run()
	if err := json.Unmarshal(out.Bytes(), &r.Cases); err != nil || len(r.Cases) == 0 {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 400 {
			msg = msg[len(msg)-400:]
		}
		if runErr == nil {
			runErr = errors.New("no results")
		}
		return fmt.Errorf("self-test child: %w: %s", runErr, msg)
	}
	r.Counters, _ = ReadStats(objs.Stats())
	return nil
}

// cgroupPrefix names the throwaway cgroups: <prefix><pid of the test>-<random>.
const cgroupPrefix = "xlane-accel-selftest-"

// removeStaleCgroups removes the throwaway cgroups of self-tests whose
// process is gone (a daemon killed during its self-test): empty, so rmdir
// takes them; one still in use refuses.
func removeStaleCgroups(root string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := os.Stat(filepath.Join("/proc", pid)); err == nil {
			continue
		}
		os.Remove(filepath.Join(root, e.Name()))
	}
}

func mapFiles(maps ...*ebpf.Map) ([]*os.File, error) {
	var files []*os.File
	for _, m := range maps {
		fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("dup map fd: %w", err)
		}
		files = append(files, os.NewFile(uintptr(fd), filepath.Base(m.String())))
	}
	return files, nil
}
