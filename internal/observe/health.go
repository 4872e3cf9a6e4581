package observe

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// pressureWarn is the map fill above which the health summary warns:
// conntrack at 1 sends new flows untracked, other maps refuse entries.
const pressureWarn = 0.9

// Health is `xlane status`'s summary of whether the datapath is as it
// should be: every endpoint's and the uplink's programs attached, every
// pinned map's pin there, no map nearly full, the conntrack GC keeping
// up, and the last warning or error xlaned logged.
func (r *Reporter) Health() *api.Health {
	h := &api.Health{}
	dp, cs := r.c.Datapath(), r.c.Status()
	var eps []model.Endpoint
	nets := map[string]*model.Network{}
	err := r.c.Store().View(func(tx *store.Tx) error {
		var err error
		if eps, err = tx.Endpoints(); err != nil {
			return err
		}
		ns, err := tx.Networks()
		for i := range ns {
			nets[ns[i].Name] = &ns[i]
		}
		return err
	})
	if err != nil {
		h.Problems = append(h.Problems, "read the store: "+err.Error())
	}
	// What the last reconcile could not apply, of objects still there.
	var unapplied []string
	for _, o := range cs.ObjectErrors {
		switch o.Kind {
		case core.ObjNetwork:
			if nets[o.Name] == nil {
				continue
			}
		case core.ObjEndpoint:
			if !slices.ContainsFunc(eps, func(e model.Endpoint) bool { return e.ID == o.Name }) {
				continue
			}
		}
		unapplied = append(unapplied, o.Kind+" "+o.Name+": "+o.Err)
	}
	slices.Sort(unapplied)
	h.Problems = append(h.Problems, unapplied...)
	if dp.Available() != nil {
		h.LastError = cs.LastError
		return h // kernel mode only: no programs, pins or maps to check
	}
	for _, e := range eps {
		n := nets[e.Network]
		if n == nil || !n.Mode.BPF() || core.Hidden(n.Name) { // a calibration's: not the user's (internal/calibration)
			continue
		}
		want := dp.ExpectedHooks(n.Mode, n.Devices().Netkit() && !e.VM) // a VM tap has tc hooks (attachPrograms)
		have := dp.Hooks(e.HostIf)
		h.Programs.Expected += len(want)
		for _, w := range want {
			if slices.Contains(have, w) {
				h.Programs.Attached++
			} else {
				h.Programs.Missing = append(h.Programs.Missing, e.HostIf+" "+w+" (endpoint "+e.ID+")")
			}
		}
	}
	want, have := dp.UplinkHooks(cs.Uplink)
	h.Programs.Expected += len(want)
	for _, w := range want {
		if slices.Contains(have, w) {
			h.Programs.Attached++
		} else {
			h.Programs.Missing = append(h.Programs.Missing, cs.Uplink+" "+w+" (uplink)")
		}
	}
	if len(h.Programs.Missing) > 0 {
		h.Problems = append(h.Problems, fmt.Sprintf("%d of %d programs not attached", len(h.Programs.Missing), h.Programs.Expected))
	}
	h.Pins.Expected, h.Pins.Missing = dp.MissingPins()
	h.Pins.Present = h.Pins.Expected - len(h.Pins.Missing)
	if len(h.Pins.Missing) > 0 {
		h.Problems = append(h.Problems, fmt.Sprintf("%d pinned maps lost their pin", len(h.Pins.Missing)))
	}
	var known map[string]int
	h.CTGC, known = r.gcHealth(cs)
	if g := h.CTGC; g != nil && g.LagSeconds > 2*g.IntervalSeconds {
		h.Problems = append(h.Problems, fmt.Sprintf("conntrack GC %.0fs behind", g.LagSeconds))
	}
	if us, err := dp.MapUsage(known); err != nil {
		h.Problems = append(h.Problems, "count map entries: "+err.Error())
	} else {
		for _, u := range us {
			if h.MapPressure == nil || u.Pressure() > h.MapPressure.Pressure {
				h.MapPressure = &api.MapPressure{Map: u.Name, Entries: u.Entries, MaxEntries: u.MaxEntries, Pressure: u.Pressure()}
			}
		}
		if p := h.MapPressure; p != nil && p.Pressure >= pressureWarn {
			h.Problems = append(h.Problems, fmt.Sprintf("map %s is %.0f%% full", p.Map, 100*p.Pressure))
		}
	}
	h.LastError = cs.LastError
	h.OK = len(h.Problems) == 0
	return h
}

// gcHealth says how far the conntrack GC is behind: the time since its
// last pass (since the loop's start before the first) beyond its
// interval, and the expired entries waiting; known has xlane_ct's
// entries, for MapUsage (one walk of the table).
func (r *Reporter) gcHealth(cs core.Status) (*api.GCHealth, map[string]int) {
	g := &api.GCHealth{IntervalSeconds: cs.GCInterval.Seconds(), Runs: cs.GC.Runs}
	since := cs.Started
	if !cs.GC.LoopStart.IsZero() {
		since = cs.GC.LoopStart
	}
	if last := cs.GC.LastRun; !last.IsZero() {
		since = last
		g.LastRun = &last
	}
	g.LagSeconds = max(0, time.Since(since).Seconds()-g.IntervalSeconds)
	known := map[string]int{}
	if st, err := r.c.Datapath().CTStats(); err == nil {
		g.Expired = st.Expired
		known["xlane_ct"] = st.Entries
	}
	return g, known
}

// LastError keeps the last warning or error xlaned logged, for the health
// summary (core.Status.LastError): log through Handler.
type LastError struct {
	mu sync.Mutex
	e  *api.LastError
}

// Get is the last warning or error (nil: none yet).
func (l *LastError) Get() *api.LastError {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.e == nil {
		return nil
	}
	e := *l.e
	return &e
}

// Handler passes every record on to h and keeps the last one at Warn or
// above in l.
func (l *LastError) Handler(h slog.Handler) slog.Handler {
	return &recordingHandler{Handler: h, rec: l}
}

// recordingHandler passes every record on and keeps the last one at Warn
// or above in rec.
type recordingHandler struct {
	slog.Handler
	rec   *LastError
	attrs []slog.Attr
}

func (h *recordingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var b strings.Builder
		b.WriteString(r.Message)
		add := func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		}
		for _, a := range h.attrs {
			add(a)
		}
		r.Attrs(add)
		h.rec.mu.Lock()
		h.rec.e = &api.LastError{Time: r.Time.UTC(), Level: strings.ToLower(r.Level.String()), Message: b.String()}
		h.rec.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordingHandler{Handler: h.Handler.WithAttrs(as), rec: h.rec, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *recordingHandler) WithGroup(name string) slog.Handler {
	return &recordingHandler{Handler: h.Handler.WithGroup(name), rec: h.rec, attrs: h.attrs}
}
