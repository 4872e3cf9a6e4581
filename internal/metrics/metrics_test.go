package metrics

import (
	"errors"
	"github.com/xlane-dev/xlane/internal/version"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

type fakeSource struct {
	mu sync.Mutex
	s  Snapshot
}

func (f *fakeSource) Snapshot() *Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.s
	return &s
}

// full is a snapshot with something in every part, so every metric of
// the collector shows.
func full() Snapshot {
	return Snapshot{
		Counters: []ReasonCount{
			{Endpoint: "a", Network: "blue", Hook: "tc", Device: DeviceEndpoint, Direction: "from_endpoint", Reason: "fwd_peer", Verdict: VerdictForwarded, Packets: 10, Bytes: 1000},
			{Endpoint: "a", Network: "blue", Hook: "tc", Device: DeviceEndpoint, Direction: "from_endpoint", Reason: "drop_fw", Verdict: VerdictDropped, Packets: 3, Bytes: 180},
			{Endpoint: "b", Network: "blue", Hook: "tc", Device: DeviceEndpoint, Direction: "to_endpoint", Reason: "deliver", Verdict: VerdictPassed, Packets: 4, Bytes: 400},
			{Hook: "xdp", Device: DeviceUplink, Direction: "to_endpoint", Reason: "drop_blocklist", Verdict: VerdictDropped, Packets: 7, Bytes: 700},
		},
		CT:        &CT{Entries: 10, MaxEntries: 100, Expired: 1, GCRuns: 2, GCDeleted: 5, GCDuration: time.Millisecond, GCLast: time.Unix(1700000000, 0)},
		Maps:      []MapCount{{Name: "xlane_ct", Entries: 10, MaxEntries: 100}},
		Rules:     []RuleCount{{Rule: "deny-dns", Action: "drop", Packets: 3, Bytes: 180}},
		Services:  []ServiceCount{{Service: "web", Active: 2, Draining: 1}},
		Backends:  []BackendFlows{{Service: "web", Backend: "10.0.0.2:80", Flows: 4}},
		Unapplied: map[string]int{"endpoint": 1, "network": 0},
		WireGuard: []WireGuardPeer{{Node: "n2", RxBytes: 10, TxBytes: 20, HandshakeAge: time.Second, Encrypted: true},
			{Node: "n3", HandshakeAge: -1, State: "cleartext", Reason: "no_handshake"}},
		Programs: []ProgramCount{{Program: "xlane_from_endpoint", Runs: 9, Runtime: time.Microsecond}},
		Neigh:    &Neigh{Events: 3, Resyncs: 1},
		Accel:    &Accel{On: true, Sockets: 2, Counters: map[string]uint64{"sock_added": 2, "msg_redirected": 10, "bytes_redirected": 1000, "fallback_backlog": 1}},
		Proxy:    map[string]uint64{"redirected": 1, "origdst_found": 1, "in_listener_added": 1},
		Errors:   map[string]error{"firewall": errors.New("test")},
		BGP: &BGP{Announced: 3, Peers: []BGPPeer{{Peer: "192.0.2.254", Established: true, Uptime: 90 * time.Second, Flaps: 1, Sent: 3, Received: 2, Accepted: 2},
			{Peer: "fd00::254"}}},
	}
}

func gather(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func value(mf *dto.MetricFamily, labels map[string]string) (float64, bool) {
	for _, m := range mf.GetMetric() {
		match := true
		for _, lp := range m.GetLabel() {
			if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Every metric of names.go is registered, with its labels and type, and
// nothing xlane_ is registered that names.go does not list.
func TestRegisteredAreNamed(t *testing.T) {
	src := &fakeSource{s: full()}
	r := New(src, version.Info{Version: "test"}, quiet())
	// One API request, so the histogram has a series.
	h := r.Instrument(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/status", nil))
	mfs := gather(t, r)
	named := map[string]Metric{}
	for _, m := range All {
		if !strings.HasPrefix(m.Name, "xlane_") {
			t.Errorf("%s: want the xlane_ prefix", m.Name)
		}
		if (m.Type == Counter) != strings.HasSuffix(m.Name, "_total") {
			t.Errorf("%s: counters and only counters end in _total", m.Name)
		}
		named[m.Name] = m
	}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "xlane_") {
			continue
		}
		m, ok := named[name]
		if !ok {
			t.Errorf("%s registered but not in names.go", name)
			continue
		}
		if got := strings.ToLower(mf.GetType().String()); got != string(m.Type) {
			t.Errorf("%s: type %s, names.go says %s", name, got, m.Type)
		}
		for _, s := range mf.GetMetric() {
			var got []string
			for _, lp := range s.GetLabel() {
				got = append(got, lp.GetName())
			}
			if strings.Join(got, ",") != strings.Join(sorted(m.Labels), ",") {
				t.Errorf("%s: labels %v, names.go says %v", name, got, m.Labels)
			}
		}
	}
	for name := range named {
		if _, ok := mfs[name]; !ok {
			t.Errorf("%s in names.go but not exported from a full snapshot", name)
		}
	}
	if v, _ := value(mfs[Drop.Name], map[string]string{LabelReason: "drop_fw", LabelEndpoint: "a"}); v != 3 {
		t.Errorf("xlane_drop_total{drop_fw,a} = %v, want 3", v)
	}
	if v, _ := value(mfs[EndpointBytes.Name], map[string]string{LabelEndpoint: "a", LabelDirection: "from_endpoint"}); v != 1180 {
		t.Errorf("xlane_endpoint_bytes_total{a,from_endpoint} = %v, want 1180", v)
	}
	if v, _ := value(mfs[ScrapeErrors.Name], map[string]string{LabelSource: "firewall"}); v != 1 {
		t.Errorf("xlane_scrape_errors_total{firewall} = %v, want 1", v)
	}
	if _, ok := mfs["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	for _, c := range []struct {
		m    Metric
		peer string
		want float64
	}{{BGPSessionEstablished, "192.0.2.254", 1}, {BGPSessionEstablished, "fd00::254", 0}, {BGPSessionUptime, "192.0.2.254", 90},
		{BGPPrefixesSent, "192.0.2.254", 3}, {BGPPrefixesReceived, "192.0.2.254", 2}, {BGPSessionFlaps, "192.0.2.254", 1}} {
		if v, ok := value(mfs[c.m.Name], map[string]string{LabelPeer: c.peer}); !ok || v != c.want {
			t.Errorf("%s{peer=%s} = %v (%v), want %v", c.m.Name, c.peer, v, ok, c.want)
		}
	}
}

// Extend adds a feature's part to every snapshot (the BGP speaker's,
// wired by cmd/xlaned); without one the source is unchanged.
func TestExtend(t *testing.T) {
	base := full()
	base.BGP = nil
	src := &fakeSource{s: base}
	if Extend(src, nil) != Source(src) {
		t.Error("Extend(src, nil) is not src")
	}
	ext := Extend(src, func(s *Snapshot) { s.BGP = &BGP{Announced: 7} })
	mfs := gather(t, New(ext, version.Info{Version: "test"}, quiet()))
	if v, ok := value(mfs[BGPAnnounced.Name], nil); !ok || v != 7 {
		t.Errorf("%s = %v (%v), want 7 from the extension", BGPAnnounced.Name, v, ok)
	}
	if mfs[CTEntries.Name] == nil {
		t.Error("the source's own metrics went missing")
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// The collector keeps nothing between scrapes: an endpoint gone from the
// snapshot is gone from the next scrape, every metric of it.
func TestRemovedEndpointSeriesVanish(t *testing.T) {
	src := &fakeSource{s: full()}
	r := New(src, version.Info{Version: "test"}, quiet())
	if n := seriesOf(gather(t, r), "a"); n == 0 {
		t.Fatal("no series of endpoint a")
	}
	src.mu.Lock()
	src.s.Counters = src.s.Counters[2:] // a removed
	src.mu.Unlock()
	if n := seriesOf(gather(t, r), "a"); n != 0 {
		t.Errorf("%d series of removed endpoint a remain", n)
	}
	if n := seriesOf(gather(t, r), "b"); n == 0 {
		t.Error("endpoint b's series went too")
	}
}

func seriesOf(mfs map[string]*dto.MetricFamily, endpoint string) int {
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == LabelEndpoint && lp.GetValue() == endpoint {
					n++
				}
			}
		}
	}
	return n
}

func TestListenRefusesRemote(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0"} {
		_, err := Listen(addr, false)
		if !errors.Is(err, ErrNotLoopback) || !strings.Contains(err.Error(), AllowRemoteFlag) {
			t.Errorf("Listen(%q): %v, want ErrNotLoopback naming %s", addr, err, AllowRemoteFlag)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		l, err := Listen(addr, false)
		if err != nil {
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		l.Close()
	}
	for _, addr := range []string{"unix:relative.sock", "127.0.0.1", "127.0.0.1:99999"} {
		if _, err := Listen(addr, false); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
			t.Errorf("Listen(%q): %v, want an error naming --metrics-addr", addr, err)
		}
	}
	path := t.TempDir() + "/m.sock"
	l, err := Listen("unix:"+path, false)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// xlane_build_info carries the build's version, commit and date (it said
// "dev" and nothing else before internal/version).
func TestBuildInfoNamesTheCommit(t *testing.T) {
	build := version.Info{Version: "v1.2.3-4-gabc", Commit: "abcdef0123", Date: "2026-11-29T09:00:00Z", GoVersion: "go1.99"}
	mfs := gather(t, New(&fakeSource{s: full()}, build, quiet()))
	want := map[string]string{LabelVersion: build.Version, LabelCommit: build.Commit, LabelBuildDate: build.Date, LabelGoVersion: build.GoVersion}
	mf := mfs[BuildInfo.Name]
	if mf == nil || len(mf.GetMetric()) != 1 {
		t.Fatalf("%s: %v", BuildInfo.Name, mf)
	}
	got := map[string]string{}
	for _, lp := range mf.GetMetric()[0].GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s labels %v, want %v", BuildInfo.Name, got, want)
	}
}

// A streaming handler behind Instrument can flush (xlane monitor's events
// never arrived while xlaned served --metrics-addr: the timing wrapper hid
// the server's http.Flusher).
func TestInstrumentFlushes(t *testing.T) {
	r := New(&fakeSource{s: full()}, version.Info{Version: "test"}, quiet())
	h := r.Instrument(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fl, ok := w.(http.Flusher)
		if !ok {
			t.Error("the instrumented ResponseWriter is no http.Flusher")
			return
		}
		w.Write([]byte("event\n"))
		fl.Flush()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/monitor", nil))
	if !rec.Flushed {
		t.Error("Flush did not reach the server's writer")
	}
}
