package bgp

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestRetrierBacksOff: a peer that never comes up gets a try window, then
// pauses of 5, 10, 20 ... s up to 2 min between windows; an established
// session resets the pauses; a session lost after being up tries again
// at once (a new window), not after a pause.
func TestRetrierBacksOff(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	r := newRetrier(5 * time.Second)
	t0 := time.Unix(1000, 0)
	r.add(a, t0)
	now := t0
	var pauses []time.Duration
	for i := 0; i < 8; i++ {
		// The window runs out.
		if p, _ := r.step(now.Add(tryWindow - time.Second)); len(p) != 0 {
			t.Fatalf("paused before the window ended")
		}
		now = now.Add(tryWindow)
		p, _ := r.step(now)
		if !slices.Equal(p, []netip.Addr{a}) {
			t.Fatalf("window %d: pause %v, want %s", i, p, a)
		}
		until := r.retryAt(a)
		pauses = append(pauses, until.Sub(now))
		if _, res := r.step(until.Add(-time.Millisecond)); len(res) != 0 {
			t.Fatal("resumed before the pause ended")
		}
		now = until
		if _, res := r.step(now); !slices.Equal(res, []netip.Addr{a}) {
			t.Fatalf("window %d: resume %v, want %s", i, res, a)
		}
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		2 * time.Minute, 2 * time.Minute, 2 * time.Minute}
	if !slices.Equal(pauses, want) {
		t.Errorf("pauses %v, want %v", pauses, want)
	}
	// Up: no pause however long it stays up, and the backoff is reset.
	r.observe(a, true, now)
	if p, _ := r.step(now.Add(time.Hour)); len(p) != 0 {
		t.Errorf("an established peer paused: %v", p)
	}
	// Lost after an hour: a fresh window from then, then the first pause.
	now = now.Add(time.Hour)
	r.observe(a, false, now)
	if p, _ := r.step(now.Add(tryWindow - time.Second)); len(p) != 0 {
		t.Error("a lost session paused before its new window ended")
	}
	now = now.Add(tryWindow)
	r.step(now)
	if got := r.retryAt(a).Sub(now); got != 5*time.Second {
		t.Errorf("first pause after a lost session %s, want 5s (reset)", got)
	}
	r.remove(a)
	if p, res := r.step(now.Add(time.Hour)); len(p)+len(res) != 0 || !r.retryAt(a).IsZero() {
		t.Error("a removed peer is still paced")
	}
}
