package ktime

import (
	"testing"
	"time"
)

func TestNowAdvances(t *testing.T) {
	a := Now()
	time.Sleep(2 * time.Millisecond)
	if b := Now(); b-a < uint64(time.Millisecond) || b < a {
		t.Fatalf("Now went from %d to %d over 2 ms", a, b)
	}
}

func TestWallOfALaterStamp(t *testing.T) {
	// A stamp 1 ms ahead of the clock (another CPU's) is about 1 ms ahead
	// of the wall clock, not wrapped around to a date centuries away.
	w := Wall(Now() + uint64(time.Millisecond))
	if d := time.Until(w); d < 0 || d > time.Second {
		t.Fatalf("Wall(now+1ms) is %v from now", d)
	}
	w = Wall(Now() - uint64(time.Second))
	if d := time.Since(w); d < 900*time.Millisecond || d > 2*time.Second {
		t.Fatalf("Wall(now-1s) is %v ago", d)
	}
}
