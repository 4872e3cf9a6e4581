package main

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func epSlice(ready map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{}
	for a, r := range ready {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(r)}})
	}
	return s
}

// TestSliceChanges: an update's keys are the addresses made ready and
// those no longer ready (gone or not ready), nothing for the unchanged.
func TestSliceChanges(t *testing.T) {
	old := epSlice(map[string]bool{"10.0.0.1": true, "10.0.0.2": true, "10.0.0.3": false})
	cur := epSlice(map[string]bool{"10.0.0.1": true, "10.0.0.2": false, "10.0.0.3": true, "10.0.0.4": true})
	got := sliceChanges(old, cur)
	slices.Sort(got)
	want := []string{readyKey("10.0.0.2", false), readyKey("10.0.0.3", true), readyKey("10.0.0.4", true)}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("update: %q, want %q", got, want)
	}
	if got := sliceChanges(cur, nil); len(got) != 3 {
		t.Errorf("delete: %q, want the three ready addresses not ready", got)
	}
}

// TestMapWatchSplitsDelay: a change seen in the maps is timed from its API
// call and, xlaned's part, from the bench's watch seeing it; a change
// undone in the API before the maps showed it (an address reused) is
// ambiguous, not lost.
func TestMapWatchSplitsDelay(t *testing.T) {
	seen := &seenLog{at: map[string]time.Time{}}
	w := &mapWatch{seen: seen, res: map[string]*delays{}}
	ip := netip.MustParseAddr("10.0.0.9")
	t0 := time.Now()
	w.expect("pod-stop", t0, readyKey(ip.String(), false), readyKey(ip.String(), true), func(s *mapState) bool { return !s.hasBackend(ip) })
	seen.mark(t0.Add(300*time.Millisecond), readyKey(ip.String(), false))
	live := &mapState{at: t0.Add(400 * time.Millisecond), live: map[[16]byte]int{ip.As16(): 1}}
	w.check(live)
	gone := &mapState{at: t0.Add(500 * time.Millisecond), live: map[[16]byte]int{}}
	w.check(gone)
	d := w.res["pod-stop"]
	if d == nil || len(d.Ms) != 1 || d.Ms[0] != 500 || len(d.XlanedMs) != 1 || d.XlanedMs[0] != 200 {
		t.Fatalf("delays %+v, want 500 ms end to end, 200 ms xlaned's", d)
	}
	// Stopped, and its address ready again (another pod) before the
	// maps showed the stop: ambiguous.
	t1 := t0.Add(time.Second)
	w.expect("pod-stop", t1, readyKey(ip.String(), false), readyKey(ip.String(), true), func(s *mapState) bool { return !s.hasBackend(ip) })
	seen.mark(t1.Add(100*time.Millisecond), readyKey(ip.String(), false))
	seen.mark(t1.Add(200*time.Millisecond), readyKey(ip.String(), true))
	w.check(&mapState{at: t1.Add(300 * time.Millisecond), live: map[[16]byte]int{ip.As16(): 1}})
	if d.Ambiguous != 1 || d.Lost != 0 || len(w.pending) != 0 {
		t.Errorf("undone change: %+v, %d pending; want it ambiguous", d, len(w.pending))
	}
}
