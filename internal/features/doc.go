// Package features probes what the running kernel can do for xlane: tcx,
// legacy tc (clsact + cls_bpf), netkit, XDP links and frags,
// BPF_FIB_LOOKUP_SKIP_NEIGH, BIG TCP, sockmap and bpf_link kinds.
//
// Probes try the real thing (create the device, attach the program, set
// the attribute and read it back) inside a private network namespace that
// dies with the probing thread, so they never touch the node's devices.
// Version numbers are never used to decide: Since only documents the
// oldest kernel of the matrix known to have a feature (docs/kernels.md).
//
// The daemon probes once at start; `xlane status` shows the result, and
// each datapath mode and device type is refused with the missing
// feature's reason, or falls back (tcx -> legacy tc), never half-works.
package features
