// Package ktime reads the clock the datapath stamps with:
// bpf_ktime_get_ns() and bpf_ktime_get_coarse_ns() are both
// CLOCK_MONOTONIC, nanoseconds since boot — a few billion on a machine
// booted seconds ago. Users compare such values or subtract them as signed
// numbers, never "now - x" in uint64 with x possibly later than now
// (another CPU's stamp read a moment later), which wraps to centuries.
package ktime
