package metrics

import "time"

// Source builds a Snapshot of the datapath and the daemon at scrape time.
// Parts it could not read are named in Snapshot.Errors; the rest is
// still exported.
type Source interface {
	Snapshot() *Snapshot
}

// Snapshot is what one scrape exports, read from the BPF maps and the
// daemon's store when Prometheus asks.
type Snapshot struct {
	Counters []ReasonCount
	CT       *CT // nil without the BPF datapath
	Maps     []MapCount
	Rules    []RuleCount
	Services []ServiceCount
	Backends []BackendFlows
	Programs []ProgramCount
	// StatsEnabled: the kernel counts BPF run time now.
	StatsEnabled bool
	Neigh        *Neigh // nil without the BPF datapath
	// Accel: socket acceleration, nil where it was never used.
	Accel *Accel
	// Proxy: the redirect counters, nil where redirects were never used.
	Proxy map[string]uint64
	// WireGuard: the peers of encryption between nodes, nil without it.
	WireGuard []WireGuardPeer
	// BGP: the BGP speaker, nil without one.
	BGP *BGP
	// Unapplied counts what the last start could not apply, by kind.
	Unapplied map[string]int
	// Errors: what could not be read (source -> error), counted in
	// xlane_scrape_errors_total.
	Errors map[string]error
}

// ReasonCount is one datapath counter, labelled with the endpoint and
// network its device belongs to.
type ReasonCount struct {
	Endpoint, Network string
	Hook              string // the attach point whose program decided: tc, xdp, netkit
	Device            string // DeviceEndpoint, DeviceUplink, DeviceOverlay or DeviceNode
	Direction         string // from_endpoint or to_endpoint
	Reason            string // fwd_peer, drop_fw, ...
	Verdict           string // VerdictForwarded, VerdictPassed, VerdictDropped
	Packets, Bytes    uint64
}

// Device label values: the device the datapath counted a packet on.
const (
	DeviceEndpoint = "endpoint" // an endpoint's host device
	DeviceUplink   = "uplink"   // the node's uplink
	DeviceOverlay  = "overlay"  // the node's VXLAN device (its way in from peers, and Linux's way out to them)
	DeviceNode     = "node"     // no device (counts the programs keep for the node)
)

// Verdict label values.
const (
	VerdictForwarded = "forwarded"
	VerdictPassed    = "passed"
	VerdictDropped   = "dropped"
)

// CT is the conntrack table and its garbage collection.
type CT struct {
	Entries, Expired int
	MaxEntries       uint32
	GCRuns           uint64
	GCDeleted        uint64
	GCDuration       time.Duration // the passes' total
	GCLast           time.Time     // zero: no pass yet
}

// MapCount is one map's fill.
type MapCount struct {
	Name       string
	Entries    int
	MaxEntries uint32
}

// RuleCount is one firewall rule's counters.
type RuleCount struct {
	Rule, Action   string
	Packets, Bytes uint64
}

// ServiceCount is a service's backends by state.
type ServiceCount struct {
	Service          string
	Active, Draining int
}

// BackendFlows is how many tracked flows of a service went to a backend.
type BackendFlows struct {
	Service, Backend string
	Flows            int
}

// ProgramCount is one program's BPF run statistics.
type ProgramCount struct {
	Program string
	Runs    uint64
	Runtime time.Duration
}

// Neigh is the neighbour mirror's activity.
type Neigh struct {
	Events, Resyncs uint64
}

// Accel is socket acceleration's state and counters.
type Accel struct {
	On       bool
	Sockets  int
	Counters map[string]uint64
}

// WireGuardPeer is one peer node's WireGuard session.
type WireGuardPeer struct {
	Node             string
	RxBytes, TxBytes uint64
	// HandshakeAge is since the last handshake; negative: none yet.
	HandshakeAge time.Duration
	Encrypted    bool
	// State and Reason: a peer not encrypted, what its traffic does
	// (pending, dropped, cleartext) and why (internal/wireguard).
	State, Reason string
}

// BGP is the BGP speaker's sessions and announcements.
type BGP struct {
	Peers     []BGPPeer
	Announced int
}

// BGPPeer is one BGP session.
type BGPPeer struct {
	Peer        string // the peer's address
	Established bool
	Uptime      time.Duration // since the session came up; 0 while down
	Flaps       uint32
	Sent        uint64
	Received    uint64
	Accepted    uint64
}

// Extend is src whose snapshots more fills in (a feature of its own, such
// as the BGP speaker, adding its part); more nil is src.
func Extend(src Source, more func(*Snapshot)) Source {
	if more == nil {
		return src
	}
	return extended{src, more}
}

type extended struct {
	Source
	more func(*Snapshot)
}

func (e extended) Snapshot() *Snapshot {
	s := e.Source.Snapshot()
	e.more(s)
	return s
}
