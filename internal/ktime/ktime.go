package ktime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now is CLOCK_MONOTONIC in nanoseconds, bpf_ktime_get_ns()'s clock.
func Now() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// Wall turns a datapath stamp into wall-clock time. A stamp a moment after
// Now (another CPU's) is a moment in the future, not centuries ago.
func Wall(stamp uint64) time.Time {
	return time.Now().Add(-time.Duration(int64(Now() - stamp)))
}
