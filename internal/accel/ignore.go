package accel

import (
	"os"
	"slices"
	"strings"
)

// IgnoreCasesEnv names self-test cases (comma-separated) whose failure
// does not keep acceleration off, for xlane's own tests and benchmark of
// the fast path on a kernel that fails them (every kernel of the matrix
// fails splice). It is an environment variable of xlaned, not a flag or
// an API field: a failing case loses or stalls data for a program that does
// what it tests, so no user setting can take one (issue 36 §2).
const IgnoreCasesEnv = "XLANE_ACCEL_TEST_IGNORE_CASES"

// IgnoredCases reads IgnoreCasesEnv; names that are not cases are left out.
func IgnoredCases() []string {
	var ign []string
	for _, c := range strings.Split(os.Getenv(IgnoreCasesEnv), ",") {
		if c = strings.TrimSpace(c); slices.Contains(CaseNames(), c) {
			ign = append(ign, c)
		}
	}
	return ign
}
