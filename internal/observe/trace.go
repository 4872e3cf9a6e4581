package observe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/trace"
)

// traceMaxHops bounds the programs one trace runs (from an endpoint or
// the uplink, then the destination endpoint's egress program).
const traceMaxHops = 3

// outsideMAC is the source MAC of a traced packet from off the node
// (RFC 7042's documentation range).
var outsideMAC = net.HardwareAddr{0x00, 0x00, 0x5e, 0x00, 0x53, 0x01}

// traceEP is an endpoint as a trace needs it.
type traceEP struct {
	model.Endpoint
	mode    model.Mode
	ifindex int
}

// Trace runs the packet req describes through the programs of the hook it
// would meet, on a copy of the datapath (datapath.NewTracer): the live
// configuration maps, a copy of conntrack, its own counters and events.
// Nothing is sent and nothing of the live datapath changes. A packet
// passed to Linux for a local endpoint then meets that endpoint's egress
// program, which the trace runs next.
func (o *Observer) Trace(req api.TraceRequest) (*api.TraceResult, error) {
	eps, err := o.traceEndpoints()
	if err != nil {
		return nil, err
	}
	frame, from, err := o.tracePacket(req, eps)
	if err != nil {
		return nil, err
	}
	tup, ok := trace.Parse(frame)
	if !ok {
		return nil, &model.FieldError{Field: "packet", Reason: "not an IPv4 or IPv6 frame"}
	}
	res := &api.TraceResult{Input: tup.String(), Hops: []api.TraceHop{}}
	hook, ifindex, dev := bpf.TraceFromUplink, 0, o.cfg.Uplink
	if from != nil {
		if !from.mode.BPF() {
			return nil, &model.FieldError{Field: "from", Reason: fmt.Sprintf("endpoint %s is in kernel mode: no programs to trace", from.ID)}
		}
		if from.mode == model.ModeXDP || from.mode == model.ModeXDPGeneric {
			res.Notes = append(res.Notes, "the endpoint's network is in "+string(from.mode)+" mode: traced through its tc program, which runs the same stages (XDP hands it what XDP does not finish)")
		}
		hook, ifindex, dev = bpf.TraceFromEndpoint, from.ifindex, from.HostIf
	} else {
		if o.cfg.Uplink == "" {
			return nil, &model.FieldError{Field: "from_ip", Reason: fmt.Sprintf("%s is no endpoint's address and xlaned has no --uplink: a packet from off the node meets no program", tup.Src)}
		}
		l, err := netlink.LinkByName(o.cfg.Uplink)
		if err != nil {
			return nil, fmt.Errorf("trace: uplink %s: %w", o.cfg.Uplink, err)
		}
		ifindex = l.Attrs().Index
	}
	if o.mon == nil || o.mon.err != nil {
		return nil, fmt.Errorf("trace: the monitor is unavailable: %w", model.ErrUnavailable)
	}
	if err := o.mon.refreshNames(); err != nil {
		return nil, err
	}
	o.tracer.mu.Lock()
	defer o.tracer.mu.Unlock()
	tr, err := o.tracer.get(o)
	if err != nil {
		return nil, err
	}
	for range traceMaxHops {
		hop, out, err := o.traceHop(tr, hook, ifindex, dev, frame, eps)
		if err != nil {
			return nil, err
		}
		res.Hops = append(res.Hops, hop)
		res.Verdict, res.Reason = hop.Verdict, hop.Reason
		// What a program passes to Linux for a local endpoint meets that
		// endpoint's egress program next.
		if hop.Verdict != "pass" || hook == bpf.TraceToEndpoint {
			break
		}
		t, ok := trace.Parse(out)
		dst := eps[t.Dst]
		if !ok || dst == nil || !dst.mode.BPF() || dst.ifindex == 0 {
			break
		}
		res.Notes = append(res.Notes, "Linux forwards what "+hook.String()+" passed to endpoint "+dst.ID+" (with the MACs Linux sets)")
		frame = linuxForward(out, dst)
		hook, ifindex, dev = bpf.TraceToEndpoint, dst.ifindex, dst.HostIf
	}
	return res, nil
}

// tracerCache keeps the tracer loaded between traces (loading it is most
// of a trace's cost), reset to the live conntrack table for each; traces
// take turns.
type tracerCache struct {
	mu sync.Mutex
	t  *bpf.Tracer
}

// get returns the tracer, loaded or reset (under mu).
func (c *tracerCache) get(o *Observer) (*bpf.Tracer, error) {
	if c.t != nil {
		if err := c.t.Reset(); err == nil {
			return c.t, nil
		}
		c.t.Close()
		c.t = nil
	}
	t, err := o.c.Datapath().NewTracer()
	if err != nil {
		return nil, err
	}
	c.t = t
	return t, nil
}

// close releases the tracer.
func (c *tracerCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t != nil {
		c.t.Close()
		c.t = nil
	}
}

// traceEndpoints maps every endpoint address to its endpoint.
func (o *Observer) traceEndpoints() (map[netip.Addr]*traceEP, error) {
	out := map[netip.Addr]*traceEP{}
	err := o.c.Store().View(func(tx *store.Tx) error {
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		for _, e := range eps {
			n, err := tx.Network(e.Network)
			if err != nil {
				return err
			}
			te := &traceEP{Endpoint: e, mode: n.Mode}
			if l, err := netconf.HostLink(&e); err == nil {
				te.ifindex = l.Attrs().Index
			}
			for _, a := range e.IPs {
				out[a] = te
			}
		}
		return nil
	})
	return out, err
}

// tracePacket builds req's frame (or takes its captured one) and finds the
// endpoint that sends it (nil: it comes from off the node).
func (o *Observer) tracePacket(req api.TraceRequest, eps map[netip.Addr]*traceEP) ([]byte, *traceEP, error) {
	if len(req.Packet) > 0 {
		t, ok := trace.Parse(req.Packet)
		if !ok {
			return nil, nil, &model.FieldError{Field: "packet", Reason: "not an IPv4 or IPv6 frame"}
		}
		return req.Packet, eps[t.Src], nil
	}
	dst, port, err := parseTraceTo(req.To)
	if err != nil {
		return nil, nil, err
	}
	var from *traceEP
	if req.From != "" {
		for _, e := range eps {
			if e.ID == req.From {
				from = e
			}
		}
		if from == nil {
			return nil, nil, model.NotFoundf("endpoint %s", req.From)
		}
	}
	var src netip.Addr
	switch {
	case req.FromIP != "":
		if src, err = netip.ParseAddr(req.FromIP); err != nil {
			return nil, nil, &model.FieldError{Field: "from_ip", Reason: fmt.Sprintf("%q is no address", req.FromIP)}
		}
		if from == nil {
			from = eps[src]
		}
	case from != nil:
		for _, a := range from.IPs {
			if a.Is4() == dst.Is4() {
				src = a
			}
		}
		if !src.IsValid() {
			return nil, nil, &model.FieldError{Field: "to", Reason: fmt.Sprintf("endpoint %s has no address of %s's family", from.ID, dst)}
		}
	default:
		return nil, nil, &model.FieldError{Field: "from", Reason: "give --from ENDPOINT or --from-ip ADDR"}
	}
	spec := trace.Spec{Src: src, Dst: dst, Proto: req.Proto, SrcPort: req.SrcPort, DstPort: port, Flags: req.Flags}
	if spec.SrcPort == 0 {
		spec.SrcPort = 40000
	}
	if from != nil {
		spec.SrcMAC, _ = net.ParseMAC(from.MAC)
		spec.DstMAC, _ = net.ParseMAC(from.HostMAC)
	} else {
		spec.SrcMAC = outsideMAC
		if l, err := netlink.LinkByName(o.cfg.Uplink); err == nil {
			spec.DstMAC = l.Attrs().HardwareAddr
		}
	}
	if p := strings.ToLower(req.Proto); (p == "tcp" || p == "udp" || p == "") && port == 0 {
		return nil, nil, &model.FieldError{Field: "to", Reason: "a TCP or UDP packet needs a port: ADDR:PORT or [ADDR6]:PORT"}
	}
	frame, err := trace.Build(spec)
	if err != nil {
		return nil, nil, &model.FieldError{Field: "packet", Reason: err.Error()}
	}
	return frame, from, nil
}

// parseTraceTo reads ADDR, ADDR:PORT or [ADDR6]:PORT.
func parseTraceTo(s string) (netip.Addr, uint16, error) {
	if s == "" {
		return netip.Addr{}, 0, &model.FieldError{Field: "to", Reason: "no destination: --to ADDR[:PORT]"}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), ap.Port(), nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}, 0, &model.FieldError{Field: "to", Reason: fmt.Sprintf("%q is not ADDR, ADDR:PORT or [ADDR6]:PORT", s)}
	}
	return a, 0, nil
}

// traceHop runs one program and describes what it did.
func (o *Observer) traceHop(tr *bpf.Tracer, hook bpf.TraceHook, ifindex int, dev string, frame []byte,
	eps map[netip.Addr]*traceEP) (api.TraceHop, []byte, error) {
	hop := api.TraceHop{Hook: hook.String(), Device: dev}
	t, _ := trace.Parse(frame)
	if hook != bpf.TraceFromUplink {
		for _, e := range eps {
			if e.ifindex == ifindex {
				hop.Endpoint = e.ID
			}
		}
	}
	existing := o.traceCTEntry(tr, t)
	run, err := tr.Run(hook, ifindex, frame)
	if err != nil {
		return hop, nil, err
	}
	hop.Return = run.Ret
	th := trace.Hop{Hook: hop.Hook, Existing: existing}
	for _, e := range run.Events {
		ev, _ := o.mon.describe(e)
		ev.Time = ev.Time.Truncate(0)
		hop.Events = append(hop.Events, ev)
		if bpf.MonType(e.Type) == bpf.MonVerdict {
			hop.Reason, hop.Verdict = ev.Reason, ev.Verdict
		}
	}
	if hop.Reason == "" {
		return hop, nil, errors.New("trace: the program reported no verdict")
	}
	th.Events, th.Reason, th.Verdict = hop.Events, hop.Reason, hop.Verdict
	out := run.Out
	ot, ok := trace.Parse(out)
	if ok && hop.Verdict == "forward" {
		th.Route = traceRoute(ot, eps, o.traceNode(ot.Dst))
		// Encapsulated in BPF (--overlay-encap bpf): the node is the
		// inner packet's, the device and next hop the outer one's.
		if port, ok := o.overlayPort(); ok && hop.Reason == "fwd_overlay" {
			if inner, vni, ok := trace.Decap(out, port); ok {
				it, _ := trace.Parse(inner)
				th.Route = fmt.Sprintf("encapsulated in BPF, VNI %d, from %s: %s", vni, ot.Src, traceRoute(ot, eps, o.traceNode(it.Dst)))
			}
		}
	}
	hop.Stages = trace.Stages(th)
	hop.Output, hop.Packet = trace.Summary(out), out
	return hop, out, nil
}

// traceCTEntry describes the conntrack entry of t's tuple in the
// tracer's copy, before a run ("" none).
func (o *Observer) traceCTEntry(tr *bpf.Tracer, t trace.Tuple) string {
	if t.Proto != 6 && t.Proto != 17 {
		return "" // ICMP: the echo identifier is keyed, not type/code
	}
	k := bpf.CTKey{Saddr: t.Src.As16(), Daddr: t.Dst.As16(), Sport: htons(t.SrcPort), Dport: htons(t.DstPort), Proto: t.Proto}
	var v bpf.CTVal
	dir := "the packet's entry (original direction)"
	if err := tr.CT().Lookup(&k, &v); err != nil {
		// A translated packet matches no key as it is: its flow is found
		// by the reply entry (the tuple the answer will carry).
		k.Saddr, k.Daddr, k.Sport, k.Dport = k.Daddr, k.Saddr, k.Dport, k.Sport
		if err := tr.CT().Lookup(&k, &v); err != nil || v.Dir != uint8(bpf.CTDirReply) {
			return ""
		}
		dir = "found by its reply entry"
	} else if v.Dir == uint8(bpf.CTDirReply) {
		dir = "the packet's entry (reply direction)"
	}
	s := ""
	if int(v.State) < len(ctStateNames) {
		s = ctStateNames[v.State]
	}
	s += ", " + dir + ", " + strconv.FormatUint(v.Packets, 10) + " packets"
	if n := natNames[v.Nat]; n != "" {
		s += ", NAT " + n + " to " + netip.AddrPortFrom(netip.AddrFrom16(v.NatAddr).Unmap(), ntohs(v.NatPort)).String()
	}
	return s
}

func htons(v uint16) uint16 { return v>>8 | v<<8 }

// traceNode is the other node whose pods have address a (nil: none).
func (o *Observer) traceNode(a netip.Addr) *model.Node {
	if o.deps.Nodes == nil {
		return nil
	}
	nodes, err := o.deps.Nodes()
	if err != nil {
		return nil
	}
	for i := range nodes {
		if nodes[i].Self {
			continue
		}
		for _, p := range nodes[i].PodCIDRs {
			if p.Contains(a) {
				return &nodes[i]
			}
		}
	}
	return nil
}

// traceRoute says where a forwarded packet goes: a local endpoint, or the
// node whose pod it is for (if another's) and the device and next hop of
// the node's route.
func traceRoute(t trace.Tuple, eps map[netip.Addr]*traceEP, peer *model.Node) string {
	if e := eps[t.Dst]; e != nil {
		return "endpoint " + e.ID + " (" + e.HostIf + ")"
	}
	s := ""
	if peer != nil {
		var under []string
		for _, a := range peer.Underlay {
			under = append(under, a.String())
		}
		s = "node " + peer.Name + " (underlay " + strings.Join(under, ", ") + "), "
	}
	rs, err := netlink.RouteGet(t.Dst.AsSlice())
	if err != nil || len(rs) == 0 {
		return strings.TrimSuffix(s, ", ")
	}
	s += "dev "
	if l, err := netlink.LinkByIndex(rs[0].LinkIndex); err == nil {
		s += l.Attrs().Name
	} else {
		s += strconv.Itoa(rs[0].LinkIndex)
	}
	if rs[0].Gw != nil {
		s += " via " + rs[0].Gw.String()
	}
	return s + ", dst MAC " + t.DstMAC.String()
}

// linuxForward is out with the MACs Linux would give it towards dst's
// host veth (the TTL as the program left it).
func linuxForward(out []byte, dst *traceEP) []byte {
	f := append([]byte(nil), out...)
	if m, err := net.ParseMAC(dst.MAC); err == nil && len(f) >= 14 {
		copy(f[0:6], m)
	}
	if m, err := net.ParseMAC(dst.HostMAC); err == nil && len(f) >= 14 {
		copy(f[6:12], m)
	}
	return f
}
