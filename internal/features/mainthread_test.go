package features

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func mainThreadNetns(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", os.Getpid()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// Probing never leaves the process's main thread in the probe's private
// namespace. A locked goroutine that ends takes its thread with it, except
// the main thread, which Go wedges instead: /proc/<pid>/ns/net, nsenter -t
// and --netns /proc/<pid>/ns/net then pointed at the probe's namespace
// (1-3 xlaned starts in 7).
func TestProbeLeavesMainThreadNetns(t *testing.T) {
	want := mainThreadNetns(t)
	for i := 0; i < 500; i++ {
		if err := inPrivateNetns(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got := mainThreadNetns(t); got != want {
			t.Fatalf("after %d private namespaces the main thread is in netns %d, not %d", i+1, got, want)
		}
	}
	for i := 0; i < 3; i++ {
		Probe()
		if got := mainThreadNetns(t); got != want {
			t.Fatalf("after Probe #%d the main thread is in netns %d, not %d", i+1, got, want)
		}
	}
}
