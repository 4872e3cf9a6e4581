package observe

import (
	"net/netip"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// MonitorBGP is the type of the BGP speaker's monitor events (internal/bgp:
// a session up, down or failed, a prefix advertised or withdrawn).
const MonitorBGP = "bgp"

// controlTypes are the monitor's event types that features of the
// control plane report through Event, beside the datapath's.
var controlTypes = []string{MonitorBGP}

func allControl() map[string]bool {
	m := map[string]bool{}
	for _, t := range controlTypes {
		m[t] = true
	}
	return m
}

// Event hands a control-plane event (ev.Type one of controlTypes) to the
// monitor clients that asked for its type and whose filters it passes
// (its peer and prefix are its addresses); a client that reads too slowly
// loses it, counted in its stats line as the datapath's events are. It
// never blocks, and costs nothing while no client listens.
func (o *Observer) Event(ev api.MonitorEvent) {
	if o == nil || o.mon == nil || o.mon.err != nil {
		return
	}
	m := o.mon
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	var refs monRefs
	if a, err := netip.ParseAddr(ev.Peer); err == nil {
		refs.addrs = append(refs.addrs, a)
	}
	if p, err := netip.ParsePrefix(ev.Prefix); err == nil {
		refs.addrs = append(refs.addrs, p.Addr())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.subs {
		if !s.ctl[ev.Type] || !s.f.match(&ev, refs) {
			continue
		}
		select {
		case s.c <- ev:
			s.sent.Add(1)
		default:
			s.dropped.Add(1)
		}
	}
}
