package control

import (
	"testing"
	"time"
)

// TestLastHitTimeSmallClock converts last hits with the monotonic clock a
// few seconds past boot: a hit 2 s ago is 2 s before the wall clock, a hit
// stamped a moment after the clock was read is "now", never 584 years off.
func TestLastHitTimeSmallClock(t *testing.T) {
	wall := time.Date(2026, 11, 24, 0, 30, 0, 0, time.UTC)
	const s = uint64(time.Second)
	for _, c := range []struct {
		lastHit, now uint64
		want         time.Time
		never        bool
	}{
		{lastHit: 0, now: 3 * s, never: true},
		{lastHit: 1 * s, now: 3 * s, want: wall.Add(-2 * time.Second)},
		{lastHit: 3 * s, now: 3 * s, want: wall},
		{lastHit: 3*s + 4e6, now: 3 * s, want: wall},
		{lastHit: 1, now: 21 * 24 * 3600 * s, want: wall.Add(-21 * 24 * time.Hour).Truncate(time.Millisecond)},
	} {
		got := lastHitTime(c.lastHit, c.now, wall)
		switch {
		case c.never && got != nil:
			t.Errorf("last hit %d at %d: %v, want never", c.lastHit, c.now, got)
		case !c.never && (got == nil || !got.Equal(c.want)):
			t.Errorf("last hit %d at %d: %v, want %v", c.lastHit, c.now, got, c.want)
		}
	}
}
