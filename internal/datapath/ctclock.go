package datapath

import "github.com/xlane-dev/xlane/internal/ktime"

// Conntrack deadlines are bpf_ktime_get_ns() values: CLOCK_MONOTONIC,
// nanoseconds since boot, so a few billion on a machine booted seconds
// ago. Every use of the clock here compares or subtracts as signed
// numbers, never "now - x" in uint64, which would wrap to ~584 years
// whenever x is later than now or now is small (issue 11).

// now is the datapath's clock: ktime.Now unless a test set clock.
func (d *BPF) now() uint64 {
	if d.clock != nil {
		return d.clock()
	}
	return ktime.Now()
}

// ctCollectable says whether a deadline passed more than grace before
// now. Written as a difference taken only once the deadline has passed:
// "expires < now - grace" would wrap while now < grace (the first seconds
// after boot) and collect every flow, and "expires + grace < now" would
// wrap for a deadline near 2^64.
func ctCollectable(expires, now, grace uint64) bool {
	return expires < now && now-expires > grace
}
