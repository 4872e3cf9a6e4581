package observe

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// MonitorBGP is the type of the BGP speaker's monitor events (internal/bgp:
// a session up, down or failed, a prefix advertised or withdrawn).
const MonitorBGP = "bgp"

// controlTypes are the monitor's event types that features of the
// control plane report through Event, beside the datapath's.
var controlTypes = []string{MonitorBGP}

// parseMonTypes splits a query's types into the datapath's and the
// control plane's; none asks for every type but verdict, "all" for every.
func parseMonTypes(names []string) (bpf.MonType, map[string]bool, error) {
	if len(names) == 0 {
		return bpf.MonAll &^ bpf.MonVerdict, allControl(), nil
	}
	ctl := map[string]bool{}
	var dp []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		switch {
		case n == "all":
			dp = append(dp, n)
			ctl = allControl()
		case slices.Contains(controlTypes, n):
			ctl[n] = true
		default:
			dp = append(dp, n)
		}
	}
	if len(dp) == 0 {
		return 0, ctl, nil
	}
	types, err := bpf.ParseMonTypes(dp)
	if err != nil {
		return 0, nil, &model.FieldError{Field: "types", Reason: fmt.Sprintf("%s; or the control plane's: %s", err, strings.Join(controlTypes, ", "))}
	}
	return types, ctl, nil
}

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
