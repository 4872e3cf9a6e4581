package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/model"
)

// monitorStatsEvery is how often a monitor stream carries its counters;
// monitorFlushEvery how often its events are flushed to the client: the
// daemon reads the datapath's ring in batches (internal/observe/monitor.go),
// and a write and a client wakeup per event would cost more than the
// event.
const (
	monitorStatsEvery = time.Second
	monitorFlushEvery = 100 * time.Millisecond
)

// monitorQuery reads api.MonitorQuery from the query parameters.
func monitorQuery(r *http.Request) (api.MonitorQuery, error) {
	v := r.URL.Query()
	q := api.MonitorQuery{Endpoint: v.Get("endpoint"), Network: v.Get("network"), Addr: v.Get("addr"),
		Proto: v.Get("proto")}
	list := func(name string) []string {
		var out []string
		for _, s := range v[name] {
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
		}
		return out
	}
	q.Types, q.Reasons = list("types"), list("reasons")
	if p := v.Get("port"); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return q, &model.FieldError{Field: "port", Reason: "port " + strconv.Quote(p) + " is not 1-65535"}
		}
		q.Port = uint16(n)
	}
	return q, nil
}

// serveMonitor streams events as JSON lines, with a counters line every
// second, until the client goes away (which ends its subscription; the
// last one's switches the datapath's events off).
func serveMonitor(d *daemon.Daemon, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := monitorQuery(r)
		if err != nil {
			writeError(w, log, r, err)
			return
		}
		sub, err := d.Observe().Monitor(q)
		if err != nil {
			writeError(w, log, r, err)
			return
		}
		defer sub.Close()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		fl, _ := w.(http.Flusher)
		enc := json.NewEncoder(w)
		dirty := false
		flush := func() {
			if fl != nil && dirty {
				fl.Flush()
			}
			dirty = false
		}
		write := func(ev api.MonitorEvent) bool {
			if err := enc.Encode(ev); err != nil {
				return false
			}
			dirty = true
			return true
		}
		if !write(sub.Stats()) { // the stream is open: clients may send traffic now
			return
		}
		flush()
		tick := time.NewTicker(monitorStatsEvery)
		defer tick.Stop()
		flushTick := time.NewTicker(monitorFlushEvery)
		defer flushTick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case ev := <-sub.C:
				if !write(ev) {
					return
				}
			case <-flushTick.C:
				flush()
			case <-tick.C:
				if !write(sub.Stats()) {
					return
				}
				flush()
			}
		}
	}
}
