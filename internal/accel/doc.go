// Package accel is xlane's socket acceleration and transparent proxy
// redirect, minus the pins (internal/datapath owns those): what a user's
// settings mean (Config, Redirect: validated, cgroup paths checked, the
// root cgroup refused), the counters' names, and the self-test that gates
// acceleration.
//
// The self-test (SelfTest) loads a throwaway, unpinned copy of
// bpf/sock_accel.c, attaches it to a throwaway cgroup, and runs the
// correctness cases (Cases) in a child process started in that cgroup and
// in a new network namespace: the child is this same binary, re-executed
// with XLANE_ACCEL_SELFTEST set, which every binary that calls SelfTest
// must hand to MaybeChild first thing in main (xlaned, the tests' TestMain).
// A case that corrupts, loses or stalls data fails the test; acceleration
// is not enabled and the failing cases are named.
//
// Nothing here touches the node's pinned objects: the daemon applies a
// Config through datapath.Datapath after SelfTest passed.
package accel
