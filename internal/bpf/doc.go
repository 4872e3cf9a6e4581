// Package bpf loads xlane's BPF objects and exposes the types they share
// with Go. Every shared type comes from bpf/lib/abi.h through bpf2go; this
// package only adds conversions (netip.Addr to map keys) and names read from
// BTF, so C stays the single definition.
//
// Maps are pinned by name under a pin directory (one per daemon instance):
// loading twice with the same directory shares the maps, which is how a
// restarted daemon adopts the running datapath.
package bpf
