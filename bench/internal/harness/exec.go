package harness

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NetnsDir is where `ip netns add` puts its names.
const NetnsDir = "/var/run/netns"

// NSExec returns argv run inside the named network namespace. nsenter
// enters only the network namespace (ip netns exec would also remount
// /sys, hiding bpffs) and execs argv, so its pid is argv's pid.
func NSExec(ns string, argv ...string) []string {
	return append([]string{"nsenter", "--net=" + filepath.Join(NetnsDir, ns)}, argv...)
}

// Run runs argv and returns its stdout; the error carries stderr.
func Run(ctx context.Context, argv ...string) (string, error) {
	return RunInput(ctx, "", argv...)
}

// RunInput is run with stdin.
func RunInput(ctx context.Context, stdin string, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // no terminal SIGINT: we stop it
	cmd.WaitDelay = 5 * time.Second
	if Verbose {
		log.Printf("+ %s", strings.Join(argv, " "))
	}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, msg)
	}
	return stdout.String(), nil
}

// RunAll runs each argv in order and stops at the first failure.
func RunAll(ctx context.Context, cmds ...[]string) error {
	for _, argv := range cmds {
		if _, err := Run(ctx, argv...); err != nil {
			return err
		}
	}
	return nil
}

// Listening reports whether a TCP socket listens on addr in netns ns.
func Listening(ctx context.Context, ns string, addr netip.AddrPort) bool {
	out, err := Run(ctx, NSExec(ns, "ss", "-Hltn", "src", addr.String())...)
	return err == nil && strings.TrimSpace(out) != ""
}

// Verbose logs every command before it runs (the benchmarks' -v).
var Verbose bool
