package features

import (
	"os"
	"slices"
	"testing"
)

// TestProbe runs every probe on this kernel and prints what it found (the
// kernel matrix collects these lines into docs/kernels.md). Features the
// matrix says this kernel has (XLANE_REQUIRE_FEATURES) must be there.
func TestProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("feature probes create devices and load BPF: run as root (make test does)")
	}
	s := Probe()
	for _, f := range s.Features {
		t.Logf("feature %s %-15s %-5v %s", s.Kernel, f.Name, f.Available, f.Detail)
	}
	for _, name := range Required() {
		if !slices.Contains(Names(), name) {
			t.Errorf("XLANE_REQUIRE_FEATURES names %q, which is not a probe (%v)", name, Names())
			continue
		}
		if err := s.Missing(name); err != nil {
			t.Errorf("required on this kernel: %v", err)
		}
	}
}

// TestProbeLeavesNothing checks that probing left no device in the
// caller's namespace.
func TestProbeLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	before, _ := os.ReadDir("/sys/class/net")
	Probe()
	after, _ := os.ReadDir("/sys/class/net")
	if len(after) != len(before) {
		t.Fatalf("devices before %d, after %d", len(before), len(after))
	}
}
