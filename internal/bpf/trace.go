package bpf

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// TraceHook is a program a trace can run.
type TraceHook int

const (
	TraceFromEndpoint TraceHook = iota // tcx ingress of a host veth (xlane_from_endpoint)
	TraceToEndpoint                    // tcx egress of a host veth (xlane_to_endpoint)
	TraceFromUplink                    // tcx ingress of the uplink (xlane_from_uplink)
)

func (h TraceHook) String() string {
	switch h {
	case TraceFromEndpoint:
		return "from_endpoint"
	case TraceToEndpoint:
		return "to_endpoint"
	case TraceFromUplink:
		return "from_uplink"
	}
	return fmt.Sprintf("hook_%d", int(h))
}

// traceShared are the maps a trace reads from the live datapath: only the
// daemon writes them (bpf/lib/maps.h, fw_maps.h, overlay.h), so a run cannot change
// them. Every other map of the trace's programs is its own: conntrack a
// copy of the live table (runs create, refresh and delete entries), the
// counters, token buckets, scratch space and event rings fresh.
var traceShared = []string{
	"xlane_endpoints", "xlane_config", "xlane_publish", "xlane_services", "xlane_maglev",
	"xlane_backends", "xlane_devmap", "xlane_neigh",
	"xlane_fw_exact", "xlane_fw_addr", "xlane_fw_scalar", "xlane_fw_pool", "xlane_fw_rules",
	"xlane_fw_gens", "xlane_fw_state", "xlane_fw_ddos", "xlane_fw_block4", "xlane_fw_block6",
	"xlane_peers", "xlane_net_vni", "xlane_vni_net", "xlane_overlay", // lib/overlay.h: other nodes
}

// Tracer runs packets through a second instance of the tc programs whose
// state is a copy (NewTracer): what a packet would do, with nothing sent
// and nothing of the live datapath changed. Runs of one Tracer share
// their copy, so a flow one run opens is known to the next.
type Tracer struct {
	live   *ebpf.Map // the datapath's conntrack table
	colls  []*ebpf.Collection
	progs  map[TraceHook]*ebpf.Program
	ct     *ebpf.Map
	events *ringbuf.Reader
}

// NewTracer loads the tc programs of the endpoints and the uplink on the
// live datapath's configuration maps (traceShared) and a copy of its
// conntrack table, with every monitor event type on and no rate limit:
// the events of a run are its stages' decisions.
func (o *Objects) NewTracer() (*Tracer, error) {
	t := &Tracer{progs: map[TraceHook]*ebpf.Program{}}
	ok := false
	defer func() {
		if !ok {
			t.Close()
		}
	}()
	live := o.XlaneCt
	info, err := live.Info()
	if err != nil {
		return nil, fmt.Errorf("trace: conntrack table: %w", err)
	}
	ct, err := ebpf.NewMap(&ebpf.MapSpec{Name: "xlane_ct_trace", Type: live.Type(), KeySize: live.KeySize(),
		ValueSize: live.ValueSize(), MaxEntries: live.MaxEntries(), Flags: info.Flags})
	if err != nil {
		return nil, fmt.Errorf("trace: copy conntrack table: %w", err)
	}
	t.ct, t.live = ct, live
	if err := t.Reset(); err != nil {
		return nil, err
	}

	// The live programs' constants (a cluster node's consult its peers),
	// with the monitor built in: its events are the trace's stages, also
	// where the live programs are loaded without it (--monitor=false).
	opt := o.opt
	opt.NoMonitor = false
	tc, err := loadSpec("tc", loadTc, opt)
	if err != nil {
		return nil, err
	}
	coll, err := t.load(o, tc)
	if err != nil {
		return nil, fmt.Errorf("trace: load tc programs: %w", err)
	}
	t.progs[TraceFromEndpoint] = coll.Programs["xlane_from_endpoint"]
	t.progs[TraceToEndpoint] = coll.Programs["xlane_to_endpoint"]
	mon := MonitorMaps{Config: coll.Maps["xlane_mon_config"], Events: coll.Maps["xlane_mon_events"]}
	if err := mon.Set(MonAll, 0, 0); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	up, err := loadSpec("tcuplink", loadTcuplink, opt)
	if err != nil {
		return nil, err
	}
	// The uplink program shares the trace's own maps with the endpoint
	// programs (one conntrack copy, one event ring), as in the datapath.
	ucoll, err := t.load(o, up, coll.Maps)
	if err != nil {
		return nil, fmt.Errorf("trace: load uplink tc program: %w", err)
	}
	t.progs[TraceFromUplink] = ucoll.Programs["xlane_from_uplink"]
	if t.events, err = ringbuf.NewReader(mon.Events); err != nil {
		return nil, fmt.Errorf("trace: event reader: %w", err)
	}
	ok = true
	return t, nil
}

// load loads spec for the tracer: traceShared maps from o, the conntrack
// copy, and the maps of own (an earlier collection of the trace) by name.
func (t *Tracer) load(o *Objects, spec *ebpf.CollectionSpec, own ...map[string]*ebpf.Map) (*ebpf.Collection, error) {
	repl := map[string]*ebpf.Map{"xlane_ct": t.ct}
	for _, name := range traceShared {
		repl[name] = o.maps[name]
	}
	for _, maps := range own {
		for name, m := range maps {
			if _, ok := repl[name]; !ok && !isDataSection(name) {
				repl[name] = m
			}
		}
	}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
	for name, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
		if m, ok := repl[name]; ok && m != nil {
			ms.MaxEntries = m.MaxEntries()
			opts.MapReplacements[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		return nil, err
	}
	t.colls = append(t.colls, coll)
	return coll, nil
}

// Reset makes the tracer's conntrack copy the live table's content again,
// forgetting what earlier runs did to it: a tracer can be kept loaded
// (loading is most of a trace's cost: the verifier) and reset per trace.
func (t *Tracer) Reset() error {
	var (
		k    CTKey
		v    CTVal
		keys []CTKey
	)
	it := t.ct.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	for i := range keys {
		t.ct.Delete(&keys[i])
	}
	it = t.live.Iterate()
	for it.Next(&k, &v) {
		if err := t.ct.Put(&k, &v); err != nil {
			return fmt.Errorf("trace: copy conntrack table: %w", err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("trace: copy conntrack table: %w", err)
	}
	return nil
}

// Close releases the tracer's programs and maps.
func (t *Tracer) Close() error {
	if t.events != nil {
		t.events.Close()
	}
	for _, c := range t.colls {
		c.Close()
	}
	if t.ct != nil {
		t.ct.Close()
	}
	return nil
}

// CT is the tracer's copy of the conntrack table.
func (t *Tracer) CT() *ebpf.Map { return t.ct }

// TraceRun is what one program did to a packet.
type TraceRun struct {
	Ret    int32      // the program's return code
	Out    []byte     // the packet as the program left it
	Events []MonEvent // what its stages reported, in order
}

// traceCtx is the leading part of struct __sk_buff up to ifindex, which
// BPF_PROG_TEST_RUN accepts for tc programs: the kernel takes the device
// (and its namespace's FIB) from ifindex.
type traceCtx struct {
	Len, PktType, Mark, QueueMapping, Protocol uint32
	VlanPresent, VlanTCI, VlanProto, Priority  uint32
	IngressIfindex, Ifindex                    uint32
}

// Run runs frame through hook's program as if it arrived on (tcx
// ingress) or left through (egress) device ifindex, in the calling
// thread's network namespace. Redirects are not carried out: a test run
// only reports them.
func (t *Tracer) Run(hook TraceHook, ifindex int, frame []byte) (TraceRun, error) {
	prog := t.progs[hook]
	if prog == nil {
		return TraceRun{}, fmt.Errorf("trace: no program for %s", hook)
	}
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+512),
		Context: traceCtx{IngressIfindex: uint32(ifindex), Ifindex: uint32(ifindex)}}
	ret, err := prog.Run(opts)
	if err != nil {
		return TraceRun{}, fmt.Errorf("trace: run %s: %w", hook, err)
	}
	r := TraceRun{Ret: int32(ret), Out: opts.DataOut}
	// The run is over: what it emitted is in the ring (submitted without
	// a wakeup, lib/monitor.h), so read without waiting.
	t.events.SetDeadline(time.Now())
	for {
		rec, err := t.events.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return r, fmt.Errorf("trace: read events: %w", err)
		}
		e, err := DecodeMonEvent(rec.RawSample)
		if err != nil {
			return r, err
		}
		r.Events = append(r.Events, e)
	}
	return r, nil
}
