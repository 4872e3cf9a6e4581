package features

import (
	"os"
	"slices"
	"strings"
	"sync"
)

// TB is the part of testing.TB that Require uses.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

var (
	probeOnce sync.Once
	probed    *Set
)

// Require skips a test on a kernel without the named feature, unless the
// kernel matrix says this kernel has it (XLANE_REQUIRE_FEATURES): then a
// missing feature fails the test instead of hiding it.
func Require(tb TB, name string) {
	tb.Helper()
	probeOnce.Do(func() { probed = Probe() })
	err := probed.Missing(name)
	switch {
	case err == nil:
	case slices.Contains(Required(), name):
		tb.Fatalf("required on this leg of the kernel matrix: %v", err)
	default:
		tb.Skipf("%v", err)
	}
}

// RequireMode skips a test of a datapath mode this kernel cannot run (err
// says why; nil: it can), unless the kernel matrix says this kernel runs
// it (XLANE_REQUIRE_MODES): then it fails.
func RequireMode(tb TB, mode string, err error) {
	tb.Helper()
	switch {
	case err == nil:
	case slices.Contains(strings.Split(os.Getenv("XLANE_REQUIRE_MODES"), ","), mode):
		tb.Fatalf("mode %s is required on this leg of the kernel matrix: %v", mode, err)
	default:
		tb.Skipf("mode %s cannot run on this kernel: %v", mode, err)
	}
}
