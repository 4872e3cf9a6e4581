package observe

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestParseMonTypes: the control plane's types (bgp) beside the
// datapath's; none and "all" include them; an unknown one names both
// lists.
func TestParseMonTypes(t *testing.T) {
	for _, c := range []struct {
		in    []string
		types bpf.MonType
		bgp   bool
	}{
		{nil, bpf.MonAll &^ bpf.MonVerdict, true},
		{[]string{"all"}, bpf.MonAll, true},
		{[]string{"bgp"}, 0, true},
		{[]string{"drop", "bgp"}, bpf.MonDrop, true},
		{[]string{"drop"}, bpf.MonDrop, false},
	} {
		types, ctl, err := parseMonTypes(c.in)
		if err != nil || types != c.types || ctl[MonitorBGP] != c.bgp {
			t.Errorf("parseMonTypes(%q) = %v, %v, %v; want %v, bgp %v", c.in, types, ctl, err, c.types, c.bgp)
		}
	}
	if _, _, err := parseMonTypes([]string{"bgpp"}); err == nil || !strings.Contains(err.Error(), "types") || !strings.Contains(err.Error(), "bgp") {
		t.Errorf("parseMonTypes(bgpp): %v, want an error naming types and listing bgp", err)
	}
}

// TestEvent: a control-plane event reaches the clients that asked for its
// type and whose filters it passes, none other; a full client's is
// counted as dropped, not waited for.
func TestEvent(t *testing.T) {
	m := &monitor{subs: map[*MonitorSub]struct{}{}}
	o := &Observer{mon: m}
	sub := func(ctl map[string]bool, f monFilter, queue int) *MonitorSub {
		c := make(chan api.MonitorEvent, queue)
		s := &MonitorSub{C: c, c: c, m: m, ctl: ctl, f: f}
		m.subs[s] = struct{}{}
		return s
	}
	all := sub(allControl(), monFilter{proto: -1}, 4)
	dpOnly := sub(map[string]bool{}, monFilter{proto: -1}, 4)
	byPeer := sub(allControl(), monFilter{proto: -1, prefix: netip.MustParsePrefix("192.0.2.0/24")}, 4)
	byPort := sub(allControl(), monFilter{proto: -1, port: 80}, 4)
	full := sub(allControl(), monFilter{proto: -1}, 0)
	o.Event(api.MonitorEvent{Type: MonitorBGP, Action: "up", Peer: "192.0.2.254"})
	o.Event(api.MonitorEvent{Type: MonitorBGP, Action: "advertise", Prefix: "198.51.100.10/32", Reason: "service web (pool public)"})
	for _, c := range []struct {
		name string
		s    *MonitorSub
		want int
	}{{"all", all, 2}, {"datapath only", dpOnly, 0}, {"addr 192.0.2.0/24", byPeer, 1}, {"port 80", byPort, 0}, {"full", full, 0}} {
		if got := len(c.s.c); got != c.want {
			t.Errorf("%s: %d events, want %d", c.name, got, c.want)
		}
	}
	if ev := <-all.C; ev.Time.IsZero() || ev.Peer != "192.0.2.254" || ev.Action != "up" {
		t.Errorf("first event %+v, want bgp up of 192.0.2.254 with a time", ev)
	}
	if full.dropped.Load() != 2 || all.sent.Load() != 2 {
		t.Errorf("full client dropped %d, all sent %d; want 2 and 2", full.dropped.Load(), all.sent.Load())
	}
	var nilObs *Observer
	nilObs.Event(api.MonitorEvent{Type: MonitorBGP}) // no observer: a no-op
}
