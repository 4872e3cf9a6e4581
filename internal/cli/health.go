package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// printHealth shows the status' health summary.
func printHealth(w io.Writer, h *api.Health) {
	if h == nil {
		return
	}
	state := "ok"
	if !h.OK {
		state = fmt.Sprintf("%d problems", len(h.Problems))
	}
	fmt.Fprintf(w, "\nhealth:\t%s\n", state)
	for _, p := range h.Problems {
		fmt.Fprintf(w, "  problem:\t%s\n", p)
	}
	fmt.Fprintf(w, "programs attached:\t%d of %d\n", h.Programs.Attached, h.Programs.Expected)
	for _, m := range h.Programs.Missing {
		fmt.Fprintf(w, "  missing:\t%s\n", m)
	}
	fmt.Fprintf(w, "map pins:\t%d of %d\n", h.Pins.Present, h.Pins.Expected)
	for _, m := range h.Pins.Missing {
		fmt.Fprintf(w, "  missing:\t%s\n", m)
	}
	if p := h.MapPressure; p != nil {
		fmt.Fprintf(w, "fullest map:\t%s %.1f%% (%d of %d)\n", p.Map, 100*p.Pressure, p.Entries, p.MaxEntries)
	}
	if g := h.CTGC; g != nil {
		last := "none yet"
		if g.LastRun != nil {
			last = time.Since(*g.LastRun).Truncate(time.Second).String() + " ago"
		}
		fmt.Fprintf(w, "conntrack gc:\tevery %gs, last pass %s, %.0fs behind, %d expired entries waiting\n", g.IntervalSeconds, last, g.LagSeconds, g.Expired)
	}
	if e := h.LastError; e != nil {
		fmt.Fprintf(w, "last %s:\t%s %s\n", e.Level, e.Time.Format(time.RFC3339), e.Message)
	}
}
