package hubble

import (
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/observe"
)

// feedTypes are the monitor's event types that make flows: never
// "verdict" (an event per packet) nor flow_close (the conntrack GC's).
var feedTypes = []string{"drop", "fw", "flow_new", "nat", "lb"}

// feedBatch is how many events the feed moves into the ring at once.
const feedBatch = 256

// feedStatsEvery is how often the feed reads its subscription's counters
// (which also refreshes the names the monitor gives events) and samples
// the flow rate.
const feedStatsEvery = 5 * time.Second

// feed moves the monitor's events into the ring until done.
type feed struct {
	ring *ring
	// lost is what the monitor could not hand the feed (its queue was
	// full) and what its rate limit and full ring suppressed, from the
	// subscription's last stats.
	dropped, suppressed, lost atomic.Uint64
	interned                  map[string]string

	mu    sync.Mutex
	rates [13]uint64 // seen, sampled every feedStatsEvery (a minute's worth)
	ri    int
}

// subscribe starts the feed on o's monitor; the error says why there are
// no flows (the monitor is off or unavailable).
func (f *feed) subscribe(o *observe.Observer, done <-chan struct{}) error {
	sub, err := o.Monitor(api.MonitorQuery{Types: feedTypes})
	if err != nil {
		return err
	}
	go f.run(sub, done)
	return nil
}

func (f *feed) run(sub *observe.MonitorSub, done <-chan struct{}) {
	defer sub.Close()
	tick := time.NewTicker(feedStatsEvery)
	defer tick.Stop()
	batch := make([]record, 0, feedBatch)
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			st := sub.Stats()
			if c := st.Counters; c != nil {
				f.dropped.Store(c.Dropped)
				f.suppressed.Store(c.Suppressed)
				f.lost.Store(c.Lost)
			}
			f.sample()
		case ev := <-sub.C:
			batch = append(batch[:0], f.record(&ev))
		drain:
			for len(batch) < feedBatch {
				select {
				case ev := <-sub.C:
					batch = append(batch, f.record(&ev))
				default:
					break drain
				}
			}
			f.ring.add(batch)
			clear(batch)
		}
	}
}

// sample records the seen count for the flow rate.
func (f *feed) sample() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ri = (f.ri + 1) % len(f.rates)
	f.rates[f.ri] = f.ring.seen()
}

// rate is the flows per second over the last minute (or since start).
func (f *feed) rate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.ring.seen()
	old := f.rates[(f.ri+1)%len(f.rates)]
	span := time.Duration(len(f.rates)-1) * feedStatsEvery
	if up := time.Since(f.ring.start); up < span {
		span = max(up, time.Second)
	}
	return float64(now-old) / span.Seconds()
}

// intern shares the few distinct strings events carry; past a bound it
// stops adding (a record then keeps its own copy).
func (f *feed) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := f.interned[s]; ok {
		return v
	}
	if len(f.interned) < 4096 {
		f.interned[s] = s
	}
	return s
}

var kinds = map[string]kind{"drop": kindDrop, "fw": kindFW, "flow_new": kindFlowNew, "nat": kindNAT, "lb": kindLB}

// record turns a monitor event into a ring record.
func (f *feed) record(ev *api.MonitorEvent) record {
	r := record{time: ev.Time.UnixNano(), kind: kinds[ev.Type], hook: f.intern(ev.Hook), length: ev.Len,
		sport: ev.SrcPort, dport: ev.DstPort, reason: f.intern(ev.Reason), rule: f.intern(ev.Rule),
		action: f.intern(ev.Action), service: f.intern(ev.Service), device: f.intern(ev.Device),
		endpoint: f.intern(ev.Endpoint)}
	r.src, _ = netip.ParseAddr(ev.Src)
	r.dst, _ = netip.ParseAddr(ev.Dst)
	r.proto = protoNumber(ev.Proto)
	// "type T code C" (drops, firewall) or "id N" (an echo flow).
	if t, c, ok := parseICMP(ev.ICMP); ok {
		r.icmp, r.icmpType, r.icmpCode = true, t, c
	}
	switch {
	case ev.NATSrc != "" && ev.NATDst == "":
		r.xlated, _ = netip.ParseAddrPort(ev.NATSrc)
		r.natSrc = true
	case ev.NATDst != "":
		r.xlated, _ = netip.ParseAddrPort(ev.NATDst)
	}
	return r
}

func parseICMP(s string) (typ, code uint8, ok bool) {
	f := strings.Fields(s)
	if len(f) != 4 || f[0] != "type" || f[2] != "code" {
		return 0, 0, false
	}
	t, err1 := strconv.ParseUint(f[1], 10, 8)
	c, err2 := strconv.ParseUint(f[3], 10, 8)
	return uint8(t), uint8(c), err1 == nil && err2 == nil
}

// protoNumber reads the monitor's protocol names (observe's protoName).
func protoNumber(s string) uint8 {
	switch s {
	case "tcp":
		return 6
	case "udp":
		return 17
	case "icmp":
		return 1
	case "icmpv6":
		return 58
	}
	n, _ := strconv.ParseUint(strings.TrimPrefix(s, "proto "), 10, 8)
	return uint8(n)
}
