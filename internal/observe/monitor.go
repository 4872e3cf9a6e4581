package observe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/ktime"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// Monitor defaults: the datapath's per-CPU event rate while a client
// listens (Config.MonitorRate), the bucket depth, and how many events a
// slow client may have queued before the daemon drops its events.
//
// The rate bounds what a listening monitor costs the traffic it watches:
// every event is read, described, filtered and encoded by xlaned and
// decoded again by the client, a few microseconds of a core each; at
// 1,000 events per second per CPU that stays near 1 % of a core per CPU,
// where 10,000 took most of one of this machine's two (issue 19's
// benchmark: a quarter of single-stream TCP). What the rate suppresses is
// counted in every client's stats line; --monitor-rate raises it.
const (
	DefaultMonitorRate = 1000
	monitorBurstDiv    = 10 // burst = rate / 10 (at least 1)
	monitorQueue       = 4096
	// monitorPoll is how often the reader drains the ring while a client
	// listens (the programs submit without waking it, bpf/lib/monitor.h);
	// monitorPollMin how often at most: when the rate on every CPU could
	// fill an eighth of the ring in monitorPoll, or a drain found it that
	// full (pollEvery).
	monitorPoll    = 100 * time.Millisecond
	monitorPollMin = 10 * time.Millisecond
	// monitorRecord is the bytes an event takes in the ring (struct
	// mon_event and the ring's 8-byte header).
	monitorRecord = 128
	// monitorBatch is how many events the reader hands out under one lock.
	monitorBatch = 256
	// monitorNamesEvery is how stale the endpoint and service names of
	// the events may get while clients listen (each subscription and
	// trace reads them afresh).
	monitorNamesEvery = 5 * time.Second
)

// monitor fans the datapath's events (bpf/lib/monitor.h) out to the API's
// monitor clients, and keeps the datapath's switch on exactly while one
// listens: the types word is the union of the clients' types, 0 when the
// last one leaves (or the daemon starts).
type monitor struct {
	o    *Observer
	maps bpf.MonitorMaps
	err  error // why there is no monitor

	rd   *ringbuf.Reader
	wake chan struct{} // Monitor's nudge to the reader when the first client comes

	mu    sync.Mutex
	subs  map[*MonitorSub]struct{}
	types atomic.Uint32 // the union of subs' types (the reader's fast test)

	// gcOver counts the conntrack GC's flow_close events beyond what one
	// pass hands out (monitorQueue): suppressed, as the datapath's rate
	// limit does.
	gcOver atomic.Uint64

	names atomic.Pointer[monNames] // endpoints and services, for the events
	// namer names the events' addresses (Observer.SetNamer; nil: none).
	namer atomic.Pointer[func(netip.Addr) string]

	// dispatch's buffers (under mu).
	evs   []api.MonitorEvent
	sends []monSend
}

// MonitorSub is one client's subscription: its events arrive on C.
type MonitorSub struct {
	C       <-chan api.MonitorEvent
	c       chan api.MonitorEvent
	m       *monitor
	types   bpf.MonType
	ctl     map[string]bool // the control plane's types it wants (Event)
	f       monFilter
	since   uint64 // CLOCK_MONOTONIC at subscription: older events are not its
	base    bpf.MonCounters
	sent    atomic.Uint64
	dropped atomic.Uint64
	once    sync.Once
}

// startMonitor sets the datapath's monitor off and reads its ring until
// Close (New calls it once).
func (o *Observer) startMonitor() *monitor {
	m := &monitor{o: o, subs: map[*MonitorSub]struct{}{}, wake: make(chan struct{}, 1)}
	if m.maps, m.err = o.c.Datapath().MonitorMaps(); m.err != nil {
		m.err = fmt.Errorf("monitor: %w", m.err)
		return m
	}
	if m.err = m.maps.Set(0, 0, 0); m.err != nil {
		return m
	}
	rd, err := ringbuf.NewReader(m.maps.Events)
	if err != nil {
		m.err = fmt.Errorf("monitor: event reader: %w: %w", err, model.ErrUnavailable)
		return m
	}
	m.rd = rd
	go func() {
		<-o.c.Done()
		rd.Close()
	}()
	go m.read()
	return m
}

// ErrMonitorOff refuses a monitor client of a daemon whose programs were
// loaded without the monitor's hooks (Config.NoMonitor).
var ErrMonitorOff = fmt.Errorf("xlaned runs with --monitor=false: its programs have no monitor hooks, so no events (restart xlaned without the flag; xlane trace works either way): %w", model.ErrUnavailable)

// Monitor subscribes to the datapath's events matching q, and to the
// control plane's (Event) of the types it names. The caller
// reads C and calls Close when done.
func (o *Observer) Monitor(q api.MonitorQuery) (*MonitorSub, error) {
	m := o.mon
	if m == nil || m.err != nil {
		if m == nil {
			return nil, fmt.Errorf("monitor: not started: %w", model.ErrUnavailable)
		}
		return nil, m.err
	}
	if o.cfg.NoMonitor {
		return nil, fmt.Errorf("monitor: %w", ErrMonitorOff)
	}
	types, ctl, err := parseMonTypes(q.Types)
	if err != nil {
		return nil, err
	}
	f, err := o.monFilter(q)
	if err != nil {
		return nil, err
	}
	if err := m.refreshNames(); err != nil {
		return nil, err
	}
	base, err := m.counters()
	if err != nil {
		return nil, err
	}
	c := make(chan api.MonitorEvent, monitorQueue)
	s := &MonitorSub{C: c, c: c, m: m, types: types, ctl: ctl, f: f, base: base, since: ktime.Now()}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subs[s] = struct{}{}
	if err := m.apply(); err != nil {
		delete(m.subs, s)
		return nil, err
	}
	if len(m.subs) == 1 {
		// The reader sleeps while nobody listens: wake it to poll.
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	return s, nil
}

// Close ends the subscription; the last one switches the datapath's
// events off.
func (s *MonitorSub) Close() {
	s.once.Do(func() {
		s.m.mu.Lock()
		defer s.m.mu.Unlock()
		delete(s.m.subs, s)
		if err := s.m.apply(); err != nil {
			s.m.o.c.Log().Error("monitor: switch events", "err", err)
		}
	})
}

// Stats is the subscription's counters line. It refreshes the names the
// events are given (endpoints come and go while a client listens).
func (s *MonitorSub) Stats() api.MonitorEvent {
	c, err := s.m.counters()
	if err != nil {
		c = s.base
	}
	if n := s.m.names.Load(); n == nil || time.Since(n.read) > monitorNamesEvery {
		if err := s.m.refreshNames(); err != nil {
			s.m.o.c.Log().Warn("monitor: refresh names", "err", err)
		}
	}
	return api.MonitorEvent{Time: time.Now(), Type: "stats", Counters: &api.MonitorCounters{
		Events: s.sent.Load(), Suppressed: c.Suppressed - s.base.Suppressed, Lost: c.Lost - s.base.Lost,
		Dropped: s.dropped.Load()}}
}

// counters are the datapath's counters, with the GC's suppressed events.
func (m *monitor) counters() (bpf.MonCounters, error) {
	c, err := m.maps.Counters()
	c.Suppressed += m.gcOver.Load()
	return c, err
}

// monExpired is the action of a flow_close the conntrack GC reports: the
// flow was collected, idle past its timeout (the datapath's flow_close
// carries the flow's state, CT_CLOSED).
const monExpired = 0xff

// GCCloses are the flow_close events of one GC pass: the flows it
// collects that never closed (UDP, ICMP and other protocols, which end by
// timing out, and TCP flows that went idle unclosed). Nil (a no-op) while
// no client wants flow_close.
type GCCloses struct {
	m   *monitor
	ts  uint64 // the pass's CLOCK_MONOTONIC time, as the datapath's events
	evs []bpf.MonEvent
}

// gcCloses starts collecting a GC pass's flow_close events.
func (m *monitor) gcCloses() *GCCloses {
	if m == nil || m.err != nil || bpf.MonType(m.types.Load())&bpf.MonFlowClose == 0 {
		return nil
	}
	return &GCCloses{m: m, ts: ktime.Now()}
}

// Add is the GC's callback for an entry it collects: a flow's original
// direction makes an event, unless the flow closed (the datapath reported
// that) or the pass has enough.
func (g *GCCloses) Add(f model.Flow) {
	if g == nil || f.Reply || f.State == "closed" {
		return
	}
	if len(g.evs) >= monitorQueue {
		g.m.gcOver.Add(1)
		return
	}
	e := bpf.MonEvent{Ts: g.ts, Type: uint8(bpf.MonFlowClose), Action: monExpired, Proto: f.Proto,
		Sport: htons(f.Src.Port()), Dport: htons(f.Dst.Port()), Saddr: f.Src.Addr().As16(), Daddr: f.Dst.Addr().As16(), Family: 6}
	if f.Dst.Addr().Is4() {
		e.Family = 4
	}
	g.evs = append(g.evs, e)
}

// Send hands the pass's events to the clients.
func (g *GCCloses) Send() {
	if g == nil {
		return
	}
	for len(g.evs) > 0 {
		n := min(len(g.evs), monitorBatch)
		g.m.dispatch(g.evs[:n])
		g.evs = g.evs[n:]
	}
}

// apply sets the datapath's types to the clients' union (under m.mu).
func (m *monitor) apply() error {
	var types bpf.MonType
	for s := range m.subs {
		types |= s.types
	}
	rate := m.o.cfg.MonitorRate
	if rate == 0 {
		rate = DefaultMonitorRate
	}
	m.types.Store(uint32(types))
	return m.maps.Set(types, rate, max(rate/monitorBurstDiv, 1))
}

// read drains the ring every monitorPoll (or sooner, pollEvery) while a
// client listens, and otherwise sleeps until Monitor wakes it. Events go
// out in batches.
//
// It never blocks in the ring's epoll_wait: it sleeps on a Go timer and
// drains without waiting (a deadline in the past). A goroutine blocked in
// a system call keeps its P, Go's sysmon takes it back after 10 ms and
// then polls every 20 µs for a while: each 100 ms wait in epoll_wait made
// some 60 wakeups of the daemon, three quarters of its context switches
// while a client listened (perf sched:sched_switch, issue 19's benchmark
// machine), each of them a preemption of whatever ran on that CPU.
func (m *monitor) read() {
	var (
		rec   ringbuf.Record
		batch = make([]bpf.MonEvent, 0, monitorBatch)
		timer = time.NewTimer(time.Hour)
		every = monitorPoll
	)
	timer.Stop()
	for {
		if m.types.Load() == 0 {
			select {
			case <-m.wake:
			case <-m.o.c.Done():
				return
			}
			every = m.pollEvery(0)
			continue
		}
		timer.Reset(every)
		select {
		case <-timer.C:
		case <-m.o.c.Done():
			return
		}
		m.rd.SetDeadline(time.Now()) // drain what is there, no waiting
		read := 0
		for {
			err := m.rd.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrFlushed) {
				break // drained
			}
			if err != nil {
				if !errors.Is(err, ringbuf.ErrClosed) {
					m.o.c.Log().Error("monitor: read events", "err", err)
				}
				return
			}
			read += monitorRecord
			var e bpf.MonEvent
			if bpf.DecodeMonEventInto(rec.RawSample, &e) != nil ||
				bpf.MonType(e.Type)&bpf.MonType(m.types.Load()) == 0 {
				continue
			}
			if batch = append(batch, e); len(batch) == monitorBatch {
				m.dispatch(batch)
				batch = batch[:0]
			}
		}
		m.dispatch(batch)
		batch = batch[:0]
		every = m.pollEvery(read)
	}
}

// pollEvery is how long the reader may wait before its next drain (read:
// the bytes the last one found): pollInterval for this ring, these CPUs
// and the configured rate.
func (m *monitor) pollEvery(read int) time.Duration {
	rate := m.o.cfg.MonitorRate
	if rate == 0 {
		rate = DefaultMonitorRate
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil || cpus < 1 {
		cpus = runtime.NumCPU()
	}
	return pollInterval(m.rd.BufferSize(), read, cpus, rate)
}

// pollInterval is monitorPoll, or less where rate events per second on
// each of cpus CPUs (their buckets' bursts included) could fill an eighth
// of a ring of ringBytes in that time, or the last drain read an eighth;
// at least monitorPollMin.
func pollInterval(ringBytes, read, cpus int, rate uint32) time.Duration {
	eighth := ringBytes / 8
	if read >= eighth || rate == 0 {
		return monitorPollMin
	}
	per := eighth/(cpus*monitorRecord) - int(max(rate/monitorBurstDiv, 1)) // events per CPU in an eighth, past a burst
	if per <= 0 {
		return monitorPollMin
	}
	return min(max(time.Duration(per)*time.Second/time.Duration(rate), monitorPollMin), monitorPoll)
}

// dispatch hands events to the subscriptions they match: all of a batch
// described and filtered first, then sent in one go, so that a client's
// stream wakes once per batch, not once per event (its goroutine would
// otherwise drain the channel faster than events are described, park,
// and be woken by the next one: a futex wake and a context switch per
// event, most of what an event cost the daemon).
func (m *monitor) dispatch(batch []bpf.MonEvent) {
	if len(batch) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	evs, sends := m.evs[:0], m.sends[:0]
	for i := range batch {
		raw := &batch[i]
		var (
			refs      monRefs
			described bool
		)
		for s := range m.subs {
			// (The ring may still hold events of a client that left
			// before this one came: they are not this one's.)
			if s.types&bpf.MonType(raw.Type) == 0 || raw.Ts < s.since {
				continue
			}
			if !described {
				var ev api.MonitorEvent
				ev, refs = m.describe(*raw)
				evs = append(evs, ev)
				described = true
			}
			if !s.f.match(&evs[len(evs)-1], refs) {
				continue
			}
			sends = append(sends, monSend{s, len(evs) - 1})
		}
	}
	for _, o := range sends {
		select {
		case o.s.c <- evs[o.ev]:
			o.s.sent.Add(1)
		default:
			o.s.dropped.Add(1)
		}
	}
	clear(evs) // (their strings)
	m.evs, m.sends = evs[:0], sends[:0]
}

// monSend is an event of dispatch's batch (an index in its descriptions)
// for a subscription.
type monSend struct {
	s  *MonitorSub
	ev int
}

// monNames maps what events carry to what clients know.
type monNames struct {
	read      time.Time // when
	byIfindex map[uint32]epRef
	byAddr    map[netip.Addr]epRef
	subnets   map[string][]netip.Prefix // network -> subnets
	services  map[uint32]string
	devices   map[uint32]string
}

type epRef struct{ id, network string }

// refreshNames reads endpoints, networks and services from the store.
func (m *monitor) refreshNames() error {
	n := &monNames{read: time.Now(), byIfindex: map[uint32]epRef{}, byAddr: map[netip.Addr]epRef{},
		subnets: map[string][]netip.Prefix{}, services: map[uint32]string{}, devices: map[uint32]string{}}
	err := m.o.c.Store().View(func(tx *store.Tx) error {
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		for _, e := range eps {
			ref := epRef{e.ID, e.Network}
			for _, a := range e.IPs {
				n.byAddr[a] = ref
			}
			if l, err := netconf.HostLink(&e); err == nil {
				n.byIfindex[uint32(l.Attrs().Index)] = ref
				n.devices[uint32(l.Attrs().Index)] = l.Attrs().Name
			}
		}
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		for _, nw := range nets {
			n.subnets[nw.Name] = nw.Subnets
		}
		svcs, err := tx.Services()
		if err != nil {
			return err
		}
		for _, s := range svcs {
			n.services[s.ID] = s.Name
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("monitor: read names: %w", err)
	}
	m.names.Store(n)
	return nil
}

// device names an ifindex that is no endpoint's (the uplink).
func (n *monNames) device(ifindex uint32) string {
	if name, ok := n.devices[ifindex]; ok {
		return name
	}
	if i, err := net.InterfaceByIndex(int(ifindex)); err == nil {
		return i.Name
	}
	return "if" + strconv.Itoa(int(ifindex))
}

// monRefs is what an event involves, for the filters.
type monRefs struct {
	eps   []epRef
	addrs []netip.Addr
	ports []uint16
	proto uint8
}

var monHooks = map[uint8]string{bpf.FwKindFromEP: "from_endpoint", bpf.FwKindToEP: "to_endpoint",
	bpf.FwKindUplink: "uplink", bpf.FwKindUplink + 1: "socket"}

var ctStateNames = bpf.CTStateNames() // enum ct_state, from BTF

var natNames = map[uint8]string{uint8(bpf.CTNatSrc): "src", uint8(bpf.CTNatDst): "dst", uint8(bpf.CTNatBoth): "both"}

// describe turns a datapath event into the API's (with the wall clock,
// names of endpoints, rules and services) and lists what it involves.
func (m *monitor) describe(e bpf.MonEvent) (api.MonitorEvent, monRefs) {
	n := m.names.Load()
	t := bpf.MonType(e.Type)
	ev := api.MonitorEvent{Time: ktime.Wall(e.Ts), Type: t.String(), Len: e.Len}
	refs := monRefs{proto: e.Proto}
	flow := t == bpf.MonFlowNew || t == bpf.MonFlowClose || t == bpf.MonNAT || t == bpf.MonLB
	if !flow || t == bpf.MonLB {
		ev.Hook = monHooks[e.Kind]
	}
	if e.Ifindex != 0 {
		if ref, ok := n.byIfindex[e.Ifindex]; ok && e.Kind != bpf.FwKindUplink {
			refs.eps = append(refs.eps, ref)
		}
		ev.Device = n.device(e.Ifindex)
	}
	if e.Family != 0 {
		src, dst := netip.AddrFrom16(e.Saddr).Unmap(), netip.AddrFrom16(e.Daddr).Unmap()
		if !src.IsUnspecified() {
			ev.Src = src.String()
			refs.addrs = append(refs.addrs, src)
		}
		ev.Dst = dst.String()
		refs.addrs = append(refs.addrs, dst)
		ev.Proto = protoName(e.Proto)
		sport, dport := ntohs(e.Sport), ntohs(e.Dport)
		switch {
		case e.Proto != unix.IPPROTO_ICMP && e.Proto != unix.IPPROTO_ICMPV6:
			ev.SrcPort, ev.DstPort = sport, dport
			refs.ports = append(refs.ports, sport, dport)
		case flow:
			ev.ICMP = "id " + strconv.Itoa(int(sport))
		default:
			ev.ICMP = fmt.Sprintf("type %d code %d", dport, sport)
		}
	}
	switch t {
	case bpf.MonDrop, bpf.MonVerdict:
		ev.Reason = bpf.Reason(e.Reason).String()
		ev.Verdict = bpf.MonVerdictName(e.Verdict)
		if e.Rule != 0 {
			ev.Rule = m.ruleName(e.Rule - 1)
		}
	case bpf.MonFW:
		ev.Rule = m.ruleName(e.Rule - 1)
		ev.Action = bpf.FwActionName(e.Action)
	case bpf.MonFlowNew, bpf.MonFlowClose:
		if int(e.Action) < len(ctStateNames) {
			ev.Action = ctStateNames[e.Action]
		} else if e.Action == monExpired {
			ev.Action = "expired"
		}
	case bpf.MonNAT:
		ev.Action = natNames[e.Action]
		to := netip.AddrPortFrom(netip.AddrFrom16(e.NatAddr).Unmap(), ntohs(e.NatPort))
		switch bpf.CTNat(e.Action) {
		case bpf.CTNatSrc:
			ev.NATSrc = to.String()
		case bpf.CTNatDst:
			ev.NATDst = to.String()
		case bpf.CTNatBoth:
			ev.NATDst = to.String()
			ev.NATSrc = netip.AddrPortFrom(netip.AddrFrom16(e.NatSaddr).Unmap(), ntohs(e.NatSport)).String()
		}
		refs.addrs = append(refs.addrs, to.Addr())
		refs.ports = append(refs.ports, to.Port())
	case bpf.MonLB:
		ev.Service = n.services[e.Service]
		if ev.Service == "" {
			ev.Service = "id " + strconv.Itoa(int(e.Service))
		}
		ev.Backend = int(e.Backend)
		to := netip.AddrPortFrom(netip.AddrFrom16(e.NatAddr).Unmap(), ntohs(e.NatPort))
		ev.NATDst = to.String()
		refs.addrs = append(refs.addrs, to.Addr())
		refs.ports = append(refs.ports, to.Port())
	}
	for _, a := range refs.addrs {
		if ref, ok := n.byAddr[a]; ok {
			refs.eps = append(refs.eps, ref)
		}
	}
	if len(refs.eps) > 0 {
		ev.Endpoint, ev.Network = refs.eps[0].id, refs.eps[0].network
	}
	if name := m.namer.Load(); name != nil && e.Family != 0 {
		ev.SrcName, ev.DstName = (*name)(netip.AddrFrom16(e.Saddr).Unmap()), (*name)(netip.AddrFrom16(e.Daddr).Unmap())
		if ev.NATDst != "" {
			ev.NATDstName = (*name)(refs.addrs[len(refs.addrs)-1])
		}
	}
	return ev, refs
}

func (m *monitor) ruleName(slot uint32) string {
	if m.o.deps.RuleName != nil {
		if name, ok := m.o.deps.RuleName(slot); ok {
			return name
		}
	}
	return "slot " + strconv.Itoa(int(slot))
}

func ntohs(v uint16) uint16 { return v>>8 | v<<8 }

// monFilter is a query, resolved.
type monFilter struct {
	endpoint, network string
	subnets           []netip.Prefix
	prefix            netip.Prefix
	port              uint16
	proto             int // -1: any
	reasons           map[string]bool
}

func (o *Observer) monFilter(q api.MonitorQuery) (monFilter, error) {
	f := monFilter{endpoint: q.Endpoint, network: q.Network, port: q.Port, proto: -1}
	err := o.c.Store().View(func(tx *store.Tx) error {
		if q.Endpoint != "" {
			if _, err := tx.Endpoint(q.Endpoint); err != nil {
				return err
			}
		}
		if q.Network != "" {
			n, err := tx.Network(q.Network)
			if err != nil {
				return err
			}
			f.subnets = n.Subnets
		}
		return nil
	})
	if err != nil {
		return f, err
	}
	if q.Addr != "" {
		p, err := netip.ParsePrefix(q.Addr)
		if err != nil {
			a, aerr := netip.ParseAddr(q.Addr)
			if aerr != nil {
				return f, &model.FieldError{Field: "addr", Reason: fmt.Sprintf("%q is no address or prefix", q.Addr)}
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		f.prefix = p.Masked()
	}
	if q.Proto != "" {
		p, err := parseProto(q.Proto)
		if err != nil {
			return f, &model.FieldError{Field: "proto", Reason: err.Error()}
		}
		f.proto = int(p)
	}
	if len(q.Reasons) > 0 {
		known := map[string]bool{}
		for r := bpf.Reason(0); r < bpf.ReasonMax; r++ {
			known[r.String()] = true
		}
		f.reasons = map[string]bool{}
		for _, r := range q.Reasons {
			if !known[r] {
				return f, &model.FieldError{Field: "reasons", Reason: fmt.Sprintf("unknown reason %q", r)}
			}
			f.reasons[r] = true
		}
	}
	return f, nil
}

// parseProto reads tcp, udp, icmp, icmpv6 or a protocol number.
func parseProto(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return unix.IPPROTO_TCP, nil
	case "udp":
		return unix.IPPROTO_UDP, nil
	case "icmp":
		return unix.IPPROTO_ICMP, nil
	case "icmpv6", "icmp6":
		return unix.IPPROTO_ICMPV6, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("unknown protocol %q (tcp, udp, icmp, icmpv6 or a number)", s)
	}
	return uint8(n), nil
}

func (f *monFilter) match(ev *api.MonitorEvent, r monRefs) bool {
	if f.endpoint != "" && !slices.ContainsFunc(r.eps, func(e epRef) bool { return e.id == f.endpoint }) {
		return false
	}
	if f.network != "" && !slices.ContainsFunc(r.eps, func(e epRef) bool { return e.network == f.network }) &&
		!slices.ContainsFunc(r.addrs, func(a netip.Addr) bool {
			return slices.ContainsFunc(f.subnets, func(p netip.Prefix) bool { return p.Contains(a) })
		}) {
		return false
	}
	if f.prefix.IsValid() && !slices.ContainsFunc(r.addrs, f.prefix.Contains) {
		return false
	}
	if f.port != 0 && !slices.ContainsFunc(r.ports, func(p uint16) bool { return p == f.port }) {
		return false
	}
	if f.proto >= 0 && int(r.proto) != f.proto {
		return false
	}
	if f.reasons != nil && !f.reasons[ev.Reason] {
		return false
	}
	return true
}

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
