package cluster

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/model"
)

// TestPeerHealth: a peer is down after the window without an answer,
// counted from the probing's start (a new peer has its grace) or the last
// answer; one answer brings it back; a new address starts afresh.
func TestPeerHealth(t *testing.T) {
	var h peerHealth
	t0 := time.Unix(1000, 0)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	w := 3 * time.Second
	step := func(now time.Time, want map[uint32]bool) {
		t.Helper()
		got := h.changes(now, w)
		if len(got) != len(want) {
			t.Fatalf("at %v: changes %v, want %v", now.Sub(t0), got, want)
		}
		for id, down := range want {
			if g, ok := got[id]; !ok || g != down {
				t.Fatalf("at %v: changes %v, want %v", now.Sub(t0), got, want)
			}
			h.mark(id, down, now)
		}
	}
	h.track(1, "n1", a, t0)
	h.track(2, "n2", b, t0)
	h.reply(a, t0.Add(2*time.Second))
	step(t0.Add(3*time.Second), nil)                      // both within the grace
	step(t0.Add(4*time.Second), map[uint32]bool{2: true}) // n2 never answered
	step(t0.Add(5*time.Second), nil)                      // n1 answered at 2 s
	step(t0.Add(6*time.Second), map[uint32]bool{1: true}) // ... and not since
	if l := h.liveness(1); l == nil || l.State != model.PeerDown || l.Address != a {
		t.Fatalf("liveness of n1: %+v", l)
	}
	if !h.isDown(1) || !h.isDown(2) {
		t.Fatal("isDown false for a down peer")
	}
	h.reply(b, t0.Add(7*time.Second))
	step(t0.Add(7*time.Second), map[uint32]bool{2: false})
	step(t0.Add(9*time.Second), nil) // n2 up since 7 s: grace again
	// A new address: probed afresh, up.
	h.track(1, "n1", netip.MustParseAddr("192.0.2.9"), t0.Add(9*time.Second))
	if h.isDown(1) {
		t.Fatal("a node with a new address kept the old one's down state")
	}
	h.keep(map[uint32]bool{2: true})
	if h.liveness(1) != nil {
		t.Fatal("a node no longer listed is still tracked")
	}
}
