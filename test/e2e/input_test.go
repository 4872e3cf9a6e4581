package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A word that is not a flag ends Go's flag parsing: xlaned refuses it
// instead of starting without the flags after it (here --uplink).
func TestXlanedRefusesPositionalArgs(t *testing.T) {
	netns := newNetns(t, "args")
	dir := t.TempDir()
	socket := filepath.Join(dir, "xlane.sock")
	pinDir := "/sys/fs/bpf/xle-" + suffix()
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	cmd := inNS(netns, filepath.Join(binDir, "xlaned"), "--state", filepath.Join(dir, "state.db"), "--socket", socket,
		"--pin-dir", pinDir, "--docker-plugin-socket=", "--calibrate-at-start=false",
		"--metrics-addr", "127.0.0.1:9643", "stray", "--uplink", "xle-no-such-dev")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("xlaned with a stray argument exited 0:\n%s", &out)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("xlaned with a stray argument started (it ignored the flags after it):\n%s", &out)
	}
	if want := `unexpected argument "stray"`; !strings.Contains(out.String(), want) {
		t.Errorf("xlaned output %q, want it to contain %q", &out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err == nil {
		t.Errorf("xlaned created its state file before refusing its arguments")
	}
}
