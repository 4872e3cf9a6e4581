package api

import "time"

// Paths of the monitor and the trace.
const (
	// PathMonitor streams events: GET with MonitorQuery's parameters
	// answers with one JSON MonitorEvent per line until the client leaves.
	PathMonitor = "/v1/monitor"
	// PathTrace runs a packet through the programs: POST a TraceRequest.
	PathTrace = "/v1/trace"
)

// MonitorQuery is what a monitor client asks for (the query parameters of
// PathMonitor, same names). Empty fields match everything.
type MonitorQuery struct {
	// Types are event types (drop, verdict, fw, flow_new, flow_close,
	// nat, lb: the datapath's; bgp: the BGP speaker's; or all); none:
	// every type but verdict.
	Types []string `json:"types,omitempty"`
	// Endpoint: events of this endpoint (ID), on its device or with one of
	// its addresses as source or destination.
	Endpoint string `json:"endpoint,omitempty"`
	// Network: events of the network's endpoints or subnets.
	Network string `json:"network,omitempty"`
	// Addr: an address or prefix, source or destination (or translated).
	Addr string `json:"addr,omitempty"`
	// Port: source or destination port (or translated).
	Port uint16 `json:"port,omitempty"`
	// Proto: tcp, udp, icmp, icmpv6 or a number.
	Proto string `json:"proto,omitempty"`
	// Reasons: drop and verdict reasons (drop_fw, drop_spoofed, ...).
	Reasons []string `json:"reasons,omitempty"`
}

// MonitorEvent is one line of the monitor's stream: an event of the
// datapath (bpf/lib/monitor.h), or, with Type "stats", the stream's
// counters (every second while events flow, and when it ends).
type MonitorEvent struct {
	Time     time.Time `json:"time"`
	Type     string    `json:"type"`               // drop, verdict, fw, flow_new, flow_close, nat, lb, bgp, stats
	Hook     string    `json:"hook,omitempty"`     // from_endpoint, to_endpoint, uplink, socket
	Device   string    `json:"device,omitempty"`   // the hook's device
	Endpoint string    `json:"endpoint,omitempty"` // the endpoint concerned (ID)
	Network  string    `json:"network,omitempty"`
	Reason   string    `json:"reason,omitempty"`  // drop, verdict: why (enum xl_reason); bgp: why
	Verdict  string    `json:"verdict,omitempty"` // drop, verdict: pass, drop, forward, replied
	Rule     string    `json:"rule,omitempty"`    // fw; a drop by the firewall: the deciding rule
	Action   string    `json:"action,omitempty"`  // fw: the rule's action; flow_*: state; nat: src, dst, both
	Proto    string    `json:"proto,omitempty"`
	Src      string    `json:"src,omitempty"`
	Dst      string    `json:"dst,omitempty"`
	SrcPort  uint16    `json:"src_port,omitempty"`
	DstPort  uint16    `json:"dst_port,omitempty"`
	ICMP     string    `json:"icmp,omitempty"` // ICMP type/code, or "id N" of an echo flow
	// NAT: the translated source and destination ("addr:port"); LB: the
	// backend in NATDst.
	NATSrc string `json:"nat_src,omitempty"`
	NATDst string `json:"nat_dst,omitempty"`
	// SrcName, DstName and NATDstName name the workloads of Src, Dst and
	// NATDst's address: NAMESPACE/POD in Kubernetes mode, NETWORK/ENDPOINT
	// elsewhere, "host" for the node's own (xlaned --hubble: the Hubble
	// server's names, docs/hubble.md; none without it).
	SrcName    string `json:"src_name,omitempty"`
	DstName    string `json:"dst_name,omitempty"`
	NATDstName string `json:"nat_dst_name,omitempty"`
	Service    string `json:"service,omitempty"` // lb: the service's name
	Backend    int    `json:"backend,omitempty"` // lb: the backend's index
	Len        uint32 `json:"len,omitempty"`     // packet bytes
	// Peer and Prefix: a bgp event's BGP peer (up, down, failed) or
	// prefix (advertise, withdraw); Action says which, Reason why.
	Peer   string `json:"peer,omitempty"`
	Prefix string `json:"prefix,omitempty"`

	Counters *MonitorCounters `json:"counters,omitempty"` // stats
}

// MonitorCounters count what a stream did not show, since it started.
type MonitorCounters struct {
	Events     uint64 `json:"events"`     // events sent to this client
	Suppressed uint64 `json:"suppressed"` // over the datapath's per-CPU rate (all clients)
	Lost       uint64 `json:"lost"`       // the ring was full (all clients)
	Dropped    uint64 `json:"dropped"`    // this client read too slowly
}

// TraceRequest describes the packet of `xlane trace`: built from fields,
// or a captured frame (Packet).
type TraceRequest struct {
	From   string `json:"from,omitempty"`    // an endpoint (ID): its address, MAC and device
	FromIP string `json:"from_ip,omitempty"` // a source address (an endpoint's, or off the node)
	// To is ADDR, ADDR:PORT or [ADDR6]:PORT.
	To     string `json:"to,omitempty"`
	Proto  string `json:"proto,omitempty"`  // tcp (default), udp, icmp
	Flags  string `json:"flags,omitempty"`  // TCP flags: S (default), SA, A, F, FA, R, P
	Family int    `json:"family,omitempty"` // 4 or 6 where From has both
	// SrcPort is the source port (default 40000) or ICMP echo identifier.
	SrcPort uint16 `json:"src_port,omitempty"`
	// Packet is an Ethernet frame (from a pcap) instead of the fields.
	Packet []byte `json:"packet,omitempty"`
}

// TraceResult is what the programs would do to the packet.
type TraceResult struct {
	Input   string     `json:"input"` // the packet, summarised
	Hops    []TraceHop `json:"hops"`  // each program it meets, in order
	Verdict string     `json:"verdict"`
	Reason  string     `json:"reason"`
	Notes   []string   `json:"notes,omitempty"`
}

// TraceHop is one program's run.
type TraceHop struct {
	Hook     string         `json:"hook"` // from_endpoint, to_endpoint, from_uplink
	Device   string         `json:"device"`
	Endpoint string         `json:"endpoint,omitempty"`
	Stages   []TraceStage   `json:"stages"`
	Verdict  string         `json:"verdict"` // pass, drop, forward, replied
	Reason   string         `json:"reason"`
	Return   int32          `json:"return"` // the program's return code
	Output   string         `json:"output"` // the packet as the program left it, summarised
	Packet   []byte         `json:"packet"` // ... and in full
	Events   []MonitorEvent `json:"events,omitempty"`
}

// TraceStage is one stage's decision.
type TraceStage struct {
	Stage  string `json:"stage"` // parse, admit, firewall, conntrack, nat, route, verdict
	Result string `json:"result"`
}
