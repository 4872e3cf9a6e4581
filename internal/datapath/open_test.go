package datapath

import (
	"fmt"
	"os"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// openTest opens a datapath with a small conntrack table, pinned under
// /sys/fs/bpf/xlt-NAME-PID; closed and unpinned when the test ends.
func openTest(t *testing.T, name string) *BPF {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF")
	}
	pinDir := fmt.Sprintf("/sys/fs/bpf/xlt-%s-%d", name, os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	d, err := Open(pinDir, bpf.Options{CTSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
