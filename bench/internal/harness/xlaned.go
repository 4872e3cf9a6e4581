package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Xlaned is one xlaned of a benchmark, run in a network namespace.
type Xlaned struct {
	Name    string        // names the process and its readiness wait ("xlaned <mode>")
	Netns   string        // where it runs
	Bins    string        // holds xlaned and xlane (BuildBinaries)
	Dir     string        // its state.db, xlane.sock and xlaned.log
	PinDir  string        // its bpffs pin dir: must not exist yet, removed on teardown
	Args    []string      // more flags
	Timeout time.Duration // until `xlane status` answers
	// Adopt: the pin dir may exist, an earlier xlaned of this Dir's
	// (a restart, which adopts the pins).
	Adopt bool
}

// StartXlaned starts x.Name and waits until it answers; undo gets its
// stop and the removal of its pin dir.
func StartXlaned(ctx context.Context, undo *UndoStack, x Xlaned) (*Proc, error) {
	if _, err := os.Stat(x.PinDir); err == nil && !x.Adopt {
		return nil, fmt.Errorf("pin dir %s exists already", x.PinDir)
	}
	undo.Push("remove pin dir "+x.PinDir, func(context.Context) error { return os.RemoveAll(x.PinDir) })
	bin := filepath.Join(x.Bins, "xlaned")
	argv := []string{bin,
		"--state", filepath.Join(x.Dir, "state.db"),
		"--socket", filepath.Join(x.Dir, "xlane.sock"),
		"--pin-dir", x.PinDir}
	// No calibration traffic beside the benchmark's own (an xlaned built
	// from an older ref, -baseline, has no calibration and no such flag).
	if help, _ := exec.CommandContext(ctx, bin, "-h").CombinedOutput(); bytes.Contains(help, []byte("-calibrate-at-start")) {
		argv = append(argv, "--calibrate-at-start=false")
	}
	argv = append(argv, x.Args...)
	p, err := StartProc(x.Name, filepath.Join(x.Dir, "xlaned.log"), NSExec(x.Netns, argv...)...)
	if err != nil {
		return nil, err
	}
	undo.Push("stop "+p.Name, p.Stop)
	err = WaitFor(ctx, x.Name, x.Timeout, p, func() bool {
		_, err := Xlane(ctx, x.Bins, x.Dir, "status")
		return err == nil
	})
	return p, err
}

// Xlane runs the xlane CLI of bins against the xlaned whose Dir is dir.
func Xlane(ctx context.Context, bins, dir string, args ...string) (string, error) {
	return Run(ctx, append([]string{filepath.Join(bins, "xlane"), "--socket", filepath.Join(dir, "xlane.sock")}, args...)...)
}
