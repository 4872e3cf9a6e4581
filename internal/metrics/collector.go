package metrics

import (
	"log/slog"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a Snapshot taken at every scrape. Nothing is kept
// between scrapes: a series exists while what it counts exists.
type collector struct {
	src   Source
	log   *slog.Logger
	descs map[string]*prometheus.Desc

	mu     sync.Mutex
	errors map[string]uint64 // xlane_scrape_errors_total by source
}

func newCollector(src Source, log *slog.Logger) *collector {
	c := &collector{src: src, log: log, descs: map[string]*prometheus.Desc{}, errors: map[string]uint64{}}
	for _, m := range All {
		if m.Name == APIRequestDuration.Name || m.Name == BuildInfo.Name {
			continue // registered on their own (serve.go)
		}
		c.descs[m.Name] = prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
	}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	srcs := make([]string, 0, len(s.Errors))
	for src := range s.Errors {
		srcs = append(srcs, src)
	}
	sort.Strings(srcs)
	counter := func(m Metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[m.Name], prometheus.CounterValue, v, labels...)
	}
	c.mu.Lock()
	for _, src := range srcs {
		c.errors[src]++
		c.log.Warn("metrics: scrape could not read", "source", src, "err", s.Errors[src])
	}
	for src, n := range c.errors {
		counter(ScrapeErrors, float64(n), src)
	}
	c.mu.Unlock()
	gauge := func(m Metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[m.Name], prometheus.GaugeValue, v, labels...)
	}

	type epKey struct{ endpoint, network, direction string }
	perEP := map[epKey][2]uint64{}
	for _, r := range mergeCounts(s.Counters) {
		counter(FlowsProcessed, float64(r.Packets), r.Verdict, r.Reason, r.Direction, r.Hook, r.Device, r.Endpoint, r.Network)
		counter(FlowsProcessedBytes, float64(r.Bytes), r.Verdict, r.Reason, r.Direction, r.Hook, r.Device, r.Endpoint, r.Network)
		if r.Verdict == VerdictDropped {
			counter(Drop, float64(r.Packets), r.Reason, r.Direction, r.Hook, r.Device, r.Endpoint, r.Network)
			counter(DropBytes, float64(r.Bytes), r.Reason, r.Direction, r.Hook, r.Device, r.Endpoint, r.Network)
		}
		if r.Device == DeviceEndpoint {
			k := epKey{r.Endpoint, r.Network, r.Direction}
			v := perEP[k]
			perEP[k] = [2]uint64{v[0] + r.Packets, v[1] + r.Bytes}
		}
	}
	for k, v := range perEP {
		counter(EndpointPackets, float64(v[0]), k.endpoint, k.network, k.direction)
		counter(EndpointBytes, float64(v[1]), k.endpoint, k.network, k.direction)
	}

	if ct := s.CT; ct != nil {
		gauge(CTEntries, float64(ct.Entries))
		gauge(CTMaxEntries, float64(ct.MaxEntries))
		if ct.MaxEntries > 0 {
			gauge(CTFillRatio, float64(ct.Entries)/float64(ct.MaxEntries))
		}
		gauge(CTExpired, float64(ct.Expired))
		counter(CTGCRuns, float64(ct.GCRuns))
		counter(CTGCDeleted, float64(ct.GCDeleted))
		ch <- prometheus.MustNewConstSummary(c.descs[CTGCDuration.Name], ct.GCRuns, ct.GCDuration.Seconds(), nil)
		last := 0.0
		if !ct.GCLast.IsZero() {
			last = float64(ct.GCLast.UnixNano()) / 1e9
		}
		gauge(CTGCLastRun, last)
	}

	for _, m := range s.Maps {
		gauge(MapEntries, float64(m.Entries), m.Name)
		gauge(MapMaxEntries, float64(m.MaxEntries), m.Name)
		if m.MaxEntries > 0 {
			gauge(MapPressure, float64(m.Entries)/float64(m.MaxEntries), m.Name)
		}
	}
	for _, r := range s.Rules {
		counter(FirewallRuleHits, float64(r.Packets), r.Rule, r.Action)
		counter(FirewallRuleBytes, float64(r.Bytes), r.Rule, r.Action)
	}
	for _, sv := range s.Services {
		gauge(ServiceBackends, float64(sv.Active), sv.Service, "active")
		gauge(ServiceBackends, float64(sv.Draining), sv.Service, "draining")
	}
	for _, b := range s.Backends {
		gauge(ServiceBackendFlows, float64(b.Flows), b.Service, b.Backend)
	}
	for _, p := range s.Programs {
		counter(ProgramRuns, float64(p.Runs), p.Program)
		counter(ProgramRunTime, p.Runtime.Seconds(), p.Program)
	}
	enabled := 0.0
	if s.StatsEnabled {
		enabled = 1
	}
	gauge(BPFStatsEnabled, enabled)
	for _, p := range s.WireGuard {
		counter(WireGuardBytes, float64(p.RxBytes), p.Node, "rx")
		counter(WireGuardBytes, float64(p.TxBytes), p.Node, "tx")
		if p.HandshakeAge >= 0 {
			gauge(WireGuardHandshakeAge, p.HandshakeAge.Seconds(), p.Node)
		}
		enc := 0.0
		if p.Encrypted {
			enc = 1
		}
		gauge(WireGuardEncrypted, enc, p.Node)
		if !p.Encrypted {
			gauge(WireGuardUnencrypted, 1, p.Node, p.Reason, p.State)
		}
	}
	if b := s.BGP; b != nil {
		gauge(BGPAnnounced, float64(b.Announced))
		for _, p := range b.Peers {
			up := 0.0
			if p.Established {
				up = 1
			}
			gauge(BGPSessionEstablished, up, p.Peer)
			gauge(BGPSessionUptime, p.Uptime.Seconds(), p.Peer)
			counter(BGPSessionFlaps, float64(p.Flaps), p.Peer)
			gauge(BGPPrefixesSent, float64(p.Sent), p.Peer)
			gauge(BGPPrefixesReceived, float64(p.Received), p.Peer)
			gauge(BGPPrefixesAccepted, float64(p.Accepted), p.Peer)
		}
	}
	for kind, n := range s.Unapplied {
		gauge(Unapplied, float64(n), kind)
	}
	if n := s.Neigh; n != nil {
		counter(NeighEvents, float64(n.Events))
		counter(NeighResyncs, float64(n.Resyncs))
	}
	if a := s.Accel; a != nil {
		on := 0.0
		if a.On {
			on = 1
		}
		gauge(AccelOn, on)
		gauge(AccelMapSockets, float64(a.Sockets))
		for n, v := range a.Counters {
			if u, ok := accelUnits[n]; ok {
				counter(u.metric, float64(v), u.labels...)
			}
		}
	}
	for n, v := range s.Proxy {
		if u, ok := proxyUnits[n]; ok {
			counter(u.metric, float64(v), u.labels...)
		}
	}
}

// mergeCounts adds up counts that carry the same labels (two devices of
// one endpoint, a device renumbered between two reads): one series each.
func mergeCounts(rs []ReasonCount) []ReasonCount {
	type key struct{ endpoint, network, hook, device, direction, reason, verdict string }
	idx := map[key]int{}
	var out []ReasonCount
	for _, r := range rs {
		k := key{r.Endpoint, r.Network, r.Hook, r.Device, r.Direction, r.Reason, r.Verdict}
		if i, ok := idx[k]; ok {
			out[i].Packets += r.Packets
			out[i].Bytes += r.Bytes
			continue
		}
		idx[k] = len(out)
		out = append(out, r)
	}
	return out
}
