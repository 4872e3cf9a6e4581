// Package bpftest is the harness the BPF program tests of internal/bpf
// share, in-package (package bpf) and external (package bpf_test, the
// firewall's, which need internal/firewall): a private network namespace
// to run BPF_PROG_TEST_RUN in (NS) and the one frame builder every test
// table describes its input and expected output with (Frame). It imports
// nothing of internal/bpf, so both kinds of test can use it; what needs
// the loaded objects (the shared sets, RunVerdict) stays in internal/bpf's
// export_test.go and objects_test.go.
package bpftest
