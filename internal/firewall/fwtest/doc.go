// Package fwtest builds random rule sets, packets and frames for the
// firewall's differential tests: the compiler against the reference model
// (internal/firewall) and the BPF classifier against both
// (internal/bpf/fw_test.go). A small fixed node (three networks, four
// endpoints) gives scopes something to resolve to, and rules draw their
// values from small pools so that rules overlap and packets match them.
package fwtest
