package bpf_test

import (
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestLoadSock loads the socket acceleration and transparent proxy programs
// (the verifier's say on every kernel of the matrix) and reads their
// counter names from BTF.
func TestLoadSock(t *testing.T) {
	a, err := bpf.LoadAccel("")
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	p, err := bpf.LoadProxy("")
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	names, err := bpf.AccelStatNames()
	if err != nil || len(names) != int(bpf.AccelStatMax) || names[0] != "sock_added" {
		t.Fatalf("accel counter names %q: %v", names, err)
	}
	if names, err := bpf.ProxyStatNames(); err != nil || len(names) != int(bpf.ProxyStatMax) {
		t.Fatalf("proxy counter names %q: %v", names, err)
	}
}
