package harness

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is a long-running child (daemon, server) stopped by its pid.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string // file with its stdout and stderr
}

// StartProc starts argv with output to logPath, in its own process group
// so a terminal ^C reaches only the harness, which then stops it in order.
func StartProc(name, logPath string, argv ...string) (*Proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if Verbose {
		log.Printf("+ %s &", strings.Join(argv, " "))
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process' id (for its CPU time in /proc).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Tail returns the end of the process's log, for error messages.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Stop sends SIGTERM to the pid, then SIGKILL after a grace period.
func (p *Proc) Stop(ctx context.Context) error {
	if p.Exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM; killed", p.Name, p.cmd.Process.Pid)
}

// WaitFor polls cond every 100ms until it is true, p (if set) exits, or
// the timeout passes.
func WaitFor(ctx context.Context, what string, timeout time.Duration, p *Proc, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s: %s exited (%v): %s", what, p.Name, p.err, p.Tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
