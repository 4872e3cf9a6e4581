package bpf

import (
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The AF_XDP port's program (bpf/xdp_vmport.c) puts every frame into the
// socket of its rx queue, and drops (counted) what arrives on a queue
// without one. The socket here is open and unbound, as QEMU's sock-fds=
// takes them: the map takes it, and a test run only reports the verdict
// (the redirect itself happens after the program, on a live device).
//
//	port (rx queue 0) --xlane_xdp_to_vm--> xlane_xsks[0] --> QEMU's socket
func TestVMPort(t *testing.T) {
	objs := ObjectsFor(t, "")
	xsks, err := NewXSKMap()
	if err != nil {
		t.Fatal(err)
	}
	defer xsks.Close()
	prog, err := objs.LoadVMPort(xsks)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	frame := make([]byte, 64)
	run := func(t *testing.T, want uint32, reason string) {
		t.Helper()
		before, err := metricsSnapshot(objs.Metrics())
		if err != nil {
			t.Fatal(err)
		}
		ret, err := RunVerdict(func(f func() error) error { return f() }, prog, objs.Metrics(),
			&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatal(err)
		}
		if ret != want {
			t.Fatalf("verdict %d, want %d", ret, want)
		}
		after, err := metricsSnapshot(objs.Metrics())
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range after {
			if n > before[k] && (Reason(k.Reason).String() != reason || Dir(k.Dir) != DirIngress) {
				t.Fatalf("counted %s/%s, want %s/%s", Reason(k.Reason), Dir(k.Dir), reason, DirIngress)
			}
		}
	}
	t.Run("no socket", func(t *testing.T) { run(t, retXDPDrop, "drop_no_xsk") })
	t.Run("socket on the queue", func(t *testing.T) {
		fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW, 0)
		if err != nil {
			t.Fatalf("open an AF_XDP socket: %v", err)
		}
		defer unix.Close(fd)
		if err := xsks.Put(uint32(0), uint32(fd)); err != nil {
			t.Fatalf("put an unbound socket into the map: %v", err)
		}
		run(t, retXDPRedirect, "fwd_xsk")
		if err := xsks.Delete(uint32(0)); err != nil {
			t.Fatal(err)
		}
		run(t, retXDPDrop, "drop_no_xsk")
	})
}
