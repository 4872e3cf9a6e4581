package control

import (
	"time"
)

// lastHitTime turns a rule's last hit (bpf_ktime_get_coarse_ns(), 0:
// never) into wall time, given the monotonic and wall clocks read
// together. A hit stamped after now (another CPU's counter read a moment
// later) is "now": now - lastHit in uint64 would wrap to centuries ago.
func lastHitTime(lastHit, now uint64, wall time.Time) *time.Time {
	if lastHit == 0 {
		return nil
	}
	ago := time.Duration(0)
	if lastHit < now {
		ago = time.Duration(now - lastHit)
	}
	t := wall.Add(-ago).UTC().Truncate(time.Millisecond)
	return &t
}
