package bpf_test

import (
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestLoadProxy loads the transparent proxy programs (the verifier's say on
// every kernel of the matrix) and reads their counter names from BTF.
func TestLoadProxy(t *testing.T) {
	p, err := bpf.LoadProxy("")
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if names, err := bpf.ProxyStatNames(); err != nil || len(names) != int(bpf.ProxyStatMax) {
		t.Fatalf("proxy counter names %q: %v", names, err)
	}
}
