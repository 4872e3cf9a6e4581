package main

// The client pod's side of the measurements: this binary run in the
// client's namespace as conn-client (the rate test), probe-ready and
// probe-change (probe.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

// load runs the rate test against targets (a file) from the client pod.
func (n *k8sNode) load(ctx context.Context, self, targets string, d time.Duration, conc int) (connrate.Result, error) {
	var r connrate.Result
	ctx, cancel := context.WithTimeout(ctx, d+60*time.Second)
	defer cancel()
	out, err := harness.Run(ctx, harness.NSExec(n.client, self, "conn-client", "-targets", targets,
		"-duration", d.String(), "-conc", fmt.Sprint(conc))...)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return r, fmt.Errorf("conn-client output %q: %w", out, err)
	}
	return r, nil
}

// startProbeReady starts probe-ready over the targets of file in the
// client pod; wait returns when every target answered.
func (n *k8sNode) startProbeReady(ctx context.Context, self, file string, timeout time.Duration) (wait func() (time.Time, error), err error) {
	argv := harness.NSExec(n.client, self, "probe-ready", "-targets", file, "-timeout", timeout.String())
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() (time.Time, error) {
		if err := cmd.Wait(); err != nil {
			return time.Time{}, fmt.Errorf("probe-ready: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(stdout.String()), 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("probe-ready output %q: %w", stdout.String(), err)
		}
		return time.Unix(0, ns), nil
	}, nil
}

func (n *k8sNode) probeReady(ctx context.Context, self, file string) (time.Time, error) {
	wait, err := n.startProbeReady(ctx, self, file, 3*time.Minute)
	if err != nil {
		return time.Time{}, err
	}
	return wait()
}

// noneAnswers checks that no target of file answers from the client pod
// (each tried once, 300 ms).
func (n *k8sNode) noneAnswers(ctx context.Context, self, file string) error {
	out, err := harness.Run(ctx, harness.NSExec(n.client, self, "probe-ready", "-targets", file, "-count-only")...)
	if err != nil {
		return err
	}
	if c := strings.TrimSpace(out); c != "0" {
		return fmt.Errorf("%s of the ClusterIPs of %s still answer", c, file)
	}
	return nil
}

// startChangeProber starts probe-change in n's client pod.
func (n *k8sNode) startChangeProber(self, vip string) (*connrate.ChangeProber, error) {
	argv := harness.NSExec(n.client, self, "probe-change", "-target", vip)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return connrate.StartChangeProber(n.mode, cmd)
}
