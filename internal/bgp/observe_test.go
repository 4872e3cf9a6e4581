package bgp

import (
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestPeerStateEvents: the monitor events of sessions: up once when a
// session becomes established, down (with why) when an established one
// is lost, failed when an attempt ends in idle with a reason; nothing for
// the retrier's own pause (admin down) or a state change without news.
func TestPeerStateEvents(t *testing.T) {
	var got []api.MonitorEvent
	a := netip.MustParseAddr("192.0.2.254")
	s := &Speaker{log: slog.New(slog.NewTextHandler(io.Discard, nil)), established: map[netip.Addr]bool{}, lastDown: map[netip.Addr]string{},
		failNoted: map[netip.Addr]bool{}, peers: map[netip.Addr]model.BGPPeer{a: {Address: a}},
		retry: newRetrier(5 * time.Second), cfg: Config{Events: func(ev api.MonitorEvent) { got = append(got, ev) }}}
	at := time.Unix(1000, 0)
	s.retry.add(a, at)
	steps := []struct {
		up, idle bool
		why      string
		want     string // action, "" for none
	}{
		{false, false, "", ""}, // active: connecting
		{false, true, downReason("bad-peer-as"), EventFailed},
		{false, true, downReason("bad-peer-as"), ""}, // once per try window
		{false, true, downReason("admin-down"), ""},
		{true, false, "", EventUp},
		{true, false, "", ""}, // still up
		{false, true, downReason("hold-timer-expired"), EventDown},
	}
	for i, st := range steps {
		n := len(got)
		s.peerState(a, st.up, st.idle, st.why, at)
		switch {
		case st.want == "" && len(got) != n:
			t.Errorf("step %d: event %+v, want none", i, got[n])
		case st.want != "" && (len(got) != n+1 || got[n].Action != st.want || got[n].Type != "bgp" || got[n].Peer != a.String()):
			t.Errorf("step %d: events %+v, want one bgp %s of %s", i, got[n:], st.want, a)
		}
	}
	if r := got[0].Reason; r != "bad peer AS: the peer's OPEN has another AS number than its --asn" {
		t.Errorf("failed event's reason %q", r)
	}
	if r := got[len(got)-1].Reason; r != "hold timer expired" {
		t.Errorf("down event's reason %q, want hold timer expired", r)
	}
	if s.lastDown[a] != "hold timer expired" {
		t.Errorf("last down %q, want hold timer expired (not the pause's admin down)", s.lastDown[a])
	}
	if s.retry.peers[a].failures != 0 || s.retry.peers[a].since != at {
		t.Errorf("retrier after up and down: %+v, want the backoff reset and a new window from the loss", *s.retry.peers[a])
	}
}

// TestTapNotifications: the NOTIFICATIONs GoBGP only logs (an OPEN
// refused on an outgoing connection) reach the speaker with their peer
// and a worded reason; the records still reach the log, at its level.
func TestTapNotifications(t *testing.T) {
	var notes []note
	var logged strings.Builder
	h := &tapHandler{Handler: slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}),
		note: func(a netip.Addr, why string) { notes = append(notes, note{a, why}) }}
	log := slog.New(h).With("Topic", "Peer", "Key", "fd00:78::254")
	log.Info("sent notification", "State", "BGP_FSM_ACTIVE", "Code", 2, "Subcode", 2, "Data", "")
	log.Info("received notification", "Code", 6, "Subcode", 2)
	log.Info("Peer Up")
	log.Warn("something else")
	want := []note{{netip.MustParseAddr("fd00:78::254"), downReason("bad-peer-as")},
		{netip.MustParseAddr("fd00:78::254"), "notification received: code 6(cease) subcode 2(administrative shutdown)"}}
	if !slices.Equal(notes, want) {
		t.Errorf("notes %+v, want %+v", notes, want)
	}
	if out := logged.String(); strings.Contains(out, "notification") || !strings.Contains(out, "something else") {
		t.Errorf("log at level warn got:\n%s\nwant the warning alone", out)
	}
}
