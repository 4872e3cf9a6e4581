package bpftest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// NS is a private network namespace, alive until the test that made it
// ends. BPF_PROG_TEST_RUN builds the skb in the calling thread's netns and
// bpf_fib_lookup consults that namespace's routes, neighbours and
// sysctls: every run goes through Do.
type NS struct {
	ns, host netns.NsHandle
}

// NewNS creates an anonymous network namespace for tb, or skips tb when
// the process is not root (BPF_PROG_TEST_RUN and namespaces need it).
func NewNS(tb testing.TB) *NS {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root for BPF_PROG_TEST_RUN and network namespaces")
	}
	runtime.LockOSThread()
	host, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("get netns: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		host.Close()
		tb.Fatalf("new netns: %v", err)
	}
	if err := netns.Set(host); err != nil {
		// The thread is stuck in ns: leave it locked, so Go discards it
		// when this goroutine ends.
		tb.Fatalf("back to host netns: %v", err)
	}
	runtime.UnlockOSThread()
	tb.Cleanup(func() {
		ns.Close()
		host.Close()
	})
	return &NS{ns: ns, host: host}
}

// Handle is the namespace (for netlink.NewHandleAt, netns.Set).
func (n *NS) Handle() netns.NsHandle { return n.ns }

// Host is the namespace the test started in.
func (n *NS) Host() netns.NsHandle { return n.host }

// Do runs fn on a thread inside the namespace.
func (n *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	if err := netns.Set(n.ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter test netns: %w", err)
	}
	err := fn()
	if serr := netns.Set(n.host); serr != nil {
		// Thread stays locked and dies with its goroutine.
		return errors.Join(err, fmt.Errorf("leave test netns: %w", serr))
	}
	runtime.UnlockOSThread()
	return err
}
