package bpf_test

import (
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestLoadAccel loads the socket acceleration programs (the verifier's say
// on every kernel of the matrix) and reads their counter names from BTF.
func TestLoadAccel(t *testing.T) {
	a, err := bpf.LoadAccel("")
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	names, err := bpf.AccelStatNames()
	if err != nil || len(names) != int(bpf.AccelStatMax) || names[0] != "sock_added" {
		t.Fatalf("accel counter names %q: %v", names, err)
	}
}
