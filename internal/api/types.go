package api

import (
	"time"

	"github.com/xlane-dev/xlane/internal/model"
)

// DefaultSocket is where xlaned listens unless told otherwise.
const DefaultSocket = "/run/xlane/xlane.sock"

// Paths of API version 1.
const (
	PathNetworks  = "/v1/networks"
	PathEndpoints = "/v1/endpoints"
	PathStatus    = "/v1/status"
	PathConntrack = "/v1/conntrack"
	PathServices  = "/v1/services"
	PathNodes     = "/v1/nodes"
	// PathRotateKey replaces this node's WireGuard key pair (POST).
	PathRotateKey = "/v1/encryption/rotate-key"
	// PathServicesApply takes many services in one request (ServiceApply).
	PathServicesApply = PathServices + "/apply"
)

// NodeAdd is the body of POST /v1/nodes.
type NodeAdd struct {
	Name     string   `json:"name"`
	Underlay []string `json:"underlay"`  // one IPv4 and/or one IPv6 address
	PodCIDRs []string `json:"pod_cidrs"` // one IPv4 and/or one IPv6 prefix
	// MTU of the node's underlay (optional): a network of the cluster
	// may not carry more than the peers take.
	MTU int `json:"mtu,omitempty"`
	// WGPublicKey is the node's WireGuard public key (base64): needed for
	// a peer when encryption is on (this node's own: its daemon's key).
	WGPublicKey string `json:"wg_public_key,omitempty"`
}

// NodeUpdate is the body of PATCH /v1/nodes/{name}: a peer's new
// WireGuard public key (its rotation), changed in place.
type NodeUpdate struct {
	WGPublicKey string `json:"wg_public_key"`
}

// ClusterInfo is how a node is joined (in Status; empty: alone).
type ClusterInfo struct {
	NodeName     string   `json:"node_name,omitempty"`
	ClusterCIDRs []string `json:"cluster_cidrs,omitempty"`
	Routing      string   `json:"routing,omitempty"`
	Device       string   `json:"device,omitempty"`
	VXLANPort    int      `json:"vxlan_port,omitempty"`
	// OverlayEncap is how this node tunnels: bpf (outer headers pushed
	// by the tc program) or device (the VXLAN device encapsulates).
	OverlayEncap string `json:"overlay_encap,omitempty"`
	// MTU is the containers' default MTU (the underlay's less VXLAN's
	// overhead); 0 until this node's own record is added.
	MTU int `json:"mtu,omitempty"`
	// Encryption is the WireGuard tunnel between nodes (nil: off).
	Encryption *EncryptionInfo `json:"encryption,omitempty"`
}

// EncryptionInfo is a node's encryption between nodes (xlaned
// --encryption wireguard, docs/encryption.md). Never the private key.
type EncryptionInfo struct {
	Mode string `json:"mode"` // wireguard
	// Engine is kernel (the kernel's WireGuard) or embedded (wireguard-go
	// in xlaned, on a TUN device).
	Engine    string `json:"engine"`
	Device    string `json:"device"`
	PublicKey string `json:"public_key"`
	Port      int    `json:"port"`
	// Strict (xlaned --encryption-strict): a peer without a working
	// session gets none of the pods' traffic (drop_unencrypted); else
	// its traffic falls back to the cleartext overlay (Cleartext counts
	// such peers).
	Strict bool `json:"strict,omitempty"`
	// Node (xlaned --encryption-node): the nodes' own traffic between
	// their underlay addresses goes through WireGuard too, but for the
	// control traffic that stays clear (docs/encryption.md).
	Node      bool             `json:"node_traffic,omitempty"`
	Cleartext int              `json:"cleartext_peers,omitempty"`
	Addresses []string         `json:"addresses,omitempty"` // the device's: this node's cluster addresses
	Peers     []EncryptionPeer `json:"peers,omitempty"`
	Error     string           `json:"error,omitempty"` // reading the device failed
}

// EncryptionPeer is one peer's WireGuard session as this node sees it.
type EncryptionPeer struct {
	Node      string `json:"node"`
	PublicKey string `json:"public_key"`
	Endpoint  string `json:"endpoint"`
	// State is what happens to the traffic to the peer's pods now:
	// encrypted, pending (no session yet, within the first handshake's
	// grace: it waits in WireGuard), dropped (no working session,
	// strict: drop_unencrypted) or cleartext (no working session: the
	// overlay without WireGuard). Reason says why it is not encrypted
	// (no_handshake, session_expired, not_on_device), Detail in words.
	State               string     `json:"state"`
	Reason              string     `json:"reason,omitempty"`
	Detail              string     `json:"detail,omitempty"`
	LastHandshake       *time.Time `json:"last_handshake,omitempty"`
	HandshakeAgeSeconds int64      `json:"handshake_age_seconds,omitempty"`
	RxBytes             uint64     `json:"rx_bytes"`
	TxBytes             uint64     `json:"tx_bytes"`
}

// NetworkCreate is the body of POST /v1/networks. Addresses are strings so
// the daemon can say which one is wrong.
type NetworkCreate struct {
	Name     string   `json:"name"`
	Subnets  []string `json:"subnets"`
	Gateways []string `json:"gateways,omitempty"`
	Mode     string   `json:"mode,omitempty"`
	MTU      int      `json:"mtu,omitempty"`
	// Masquerade defaults to true (nil).
	Masquerade *bool `json:"masquerade,omitempty"`
	// Internal networks reach nothing beyond their subnets and the node.
	Internal bool `json:"internal,omitempty"`
	// ICC: the network's endpoints reach each other; defaults to true
	// (nil). False needs a BPF mode.
	ICC *bool `json:"icc,omitempty"`
	// Isolated networks exchange nothing with endpoints of other
	// networks of the node (the node, the outside and published ports
	// still work). Needs a BPF mode.
	Isolated bool `json:"isolated,omitempty"`
	// AllowUnsolicited: flows opened from off the node reach any port of
	// the endpoints; without it only replies to the endpoints' own flows
	// and published ports get in.
	AllowUnsolicited bool `json:"allow_unsolicited,omitempty"`
	// Device is the endpoints' device pair: auto (default), veth, netkit
	// or netkit-l2.
	Device string `json:"device,omitempty"`
	// VNI between nodes (0: derived from the name, the same on every
	// node).
	VNI uint32 `json:"vni,omitempty"`
	// VLAN puts the network on this 802.1Q VLAN of the uplink (1-4094; 0:
	// none): its subnets are the VLAN's, its endpoints reached from the
	// VLAN (and their VNI) only. Needs xlaned --uplink and a BPF mode.
	VLAN uint16 `json:"vlan,omitempty"`
	// BigTCP: auto (default: where the node's calibration measured a
	// win), on or off; GSO/GRO aggregates of 192 KiB on the endpoints'
	// veths.
	BigTCP string `json:"big_tcp,omitempty"`
}

// NetworkUpdate is the body of PATCH /v1/networks/{name}. Empty fields are
// left as they are.
type NetworkUpdate struct {
	Mode string `json:"mode,omitempty"`
}

// ServiceCreate is the body of POST /v1/services.
type ServiceCreate struct {
	Name     string   `json:"name"`
	VIP      string   `json:"vip"`      // IP:PORT[/tcp|udp]
	Backends []string `json:"backends"` // IP:PORT[@WEIGHT], weight 0 drains
	Affinity bool     `json:"affinity,omitempty"`
	// AffinityTimeout (seconds, with Affinity): how long a client keeps
	// its backend after its last new flow; 0: 10800 (Kubernetes'
	// default), at most 86400.
	AffinityTimeout int `json:"affinity_timeout,omitempty"`
}

// ServiceApply is the body of POST /v1/services/apply: services to create
// or update (by name) in one transaction, all or none.
type ServiceApply struct {
	Services []ServiceCreate `json:"services"`
	// Prune removes every service not listed: the request is the whole
	// set (a controller's full sync).
	Prune bool `json:"prune,omitempty"`
	// PrunePrefix limits Prune to the services whose names start with
	// it: a controller owning a name space (Kubernetes mode's "k8s.")
	// leaves the others alone.
	PrunePrefix string `json:"prune_prefix,omitempty"`
	// Delete removes the services named (a missing one is no error) in
	// the same transaction: a controller's incremental sync, which lists
	// only what changed.
	Delete []string `json:"delete,omitempty"`
}

// ServicesMemory is the kernel memory of the programmed services, as the
// kernel accounts the BPF maps (memlock).
type ServicesMemory struct {
	Services int `json:"services"`
	// TableBytes: the Maglev tables (8 bytes a slot; a table has the
	// smallest prime >= 100 x backends, >= 251 slots).
	TableBytes uint64 `json:"table_bytes"`
	// MapBytes: the services, tables-of-tables and backends hashes,
	// buckets included.
	MapBytes uint64 `json:"map_bytes"`
	// FixedBytes: what the hashes cost with no service (their buckets).
	FixedBytes uint64 `json:"fixed_bytes"`
	// PerServiceBytes is (TableBytes + MapBytes - FixedBytes) / Services.
	PerServiceBytes uint64 `json:"per_service_bytes"`
}

// ServiceUpdate is the body of PATCH /v1/services/{name}: the new backend
// set (backends left out are removed, weight 0 drains); with backends null
// and an affinity field given, the backends stay.
type ServiceUpdate struct {
	Backends        []string `json:"backends"`
	Affinity        *bool    `json:"affinity,omitempty"`
	AffinityTimeout *int     `json:"affinity_timeout,omitempty"`
}

// PortsUpdate is the body of POST and DELETE /v1/endpoints/{id}/ports:
// [HOSTIP:]NODEPORT:PORT[/tcp|udp] mappings to publish or withdraw.
type PortsUpdate struct {
	Ports []string `json:"ports"`
}

// Flow is one conntrack entry as GET /v1/conntrack shows it.
type Flow struct {
	Proto     string `json:"proto"`
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	Direction string `json:"direction"` // original or reply
	State     string `json:"state"`
	NAT       string `json:"nat,omitempty"`
	NATTo     string `json:"nat_to,omitempty"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
	ExpiresIn int64  `json:"expires_in_seconds"`
}

// CTStats is the body of GET /v1/conntrack/stats.
type CTStats struct {
	Entries       int    `json:"entries"`
	MaxEntries    uint32 `json:"max_entries"`
	Expired       int    `json:"expired"`
	BytesPerEntry int    `json:"bytes_per_entry"`
	// TableFull counts packets of flows forwarded untracked because the
	// table was full.
	TableFull uint64 `json:"table_full_packets"`
	GCRuns    uint64 `json:"gc_runs"`
	GCDeleted uint64 `json:"gc_deleted"`
}

// EndpointAdd is the body of POST /v1/endpoints.
type EndpointAdd struct {
	ID      string `json:"id,omitempty"` // chosen by the caller (runtime) or generated
	Network string `json:"network"`
	// Netns is a namespace name (as in `ip netns`) or path. Leave it empty
	// with VethOnly for runtimes that move the interface themselves.
	Netns    string   `json:"netns,omitempty"`
	VethOnly bool     `json:"veth_only,omitempty"`
	IfName   string   `json:"ifname,omitempty"`
	IPs      []string `json:"ips,omitempty"`
	// MAC is the container side's MAC address (a VM's: the guest's);
	// empty: a random one.
	MAC string `json:"mac,omitempty"`
	// VM asks for a QEMU guest's port: a tap device instead of a veth,
	// with Queues queues (default 1), no netns; the guest gets its
	// addresses by DHCP.
	VM     bool `json:"vm,omitempty"`
	Queues int  `json:"queues,omitempty"`
	// Backend is the VM port's kind: tap (the default); af-xdp is refused
	// with the reason (VMStatus).
	Backend string `json:"backend,omitempty"`
	// Labels select the endpoint in standalone ClusterNetworkPolicies
	// (docs/policy.md): Kubernetes label keys and values.
	Labels map[string]string `json:"labels,omitempty"`
}

// ReasonCounter is one datapath counter: why packets left a program.
type ReasonCounter struct {
	Reason    string `json:"reason"`    // as in bpf/lib/abi.h: fwd_peer, drop_spoofed, ...
	Direction string `json:"direction"` // from_endpoint or to_endpoint
	Drop      bool   `json:"drop"`
	model.Counter
}

// EndpointInfo is an endpoint as the API shows it.
type EndpointInfo struct {
	model.Endpoint
	Mode model.Mode `json:"mode"`
	// State is "ready", or what is wrong ("host veth missing", ...);
	// "degraded" when the last reconcile could not apply all of it (Error
	// says what failed; the rest is applied and traffic flows as far as
	// it can).
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Link counters of the host veth: what the endpoint sent (rx on the
	// host side) and what it was given (tx on the host side). Packets the
	// tc datapath redirects straight into the container are in Reasons.
	// Datapath lists the programs attached to the host veth (kind/hook).
	Datapath []string `json:"datapath,omitempty"`
	// Offloads of the container-side veth (GRO gives it the NAPI that
	// native XDP_REDIRECT needs; checksum and TSO offloads decide what the
	// XDP datapath must fix or cannot get).
	Offloads map[string]bool `json:"offloads,omitempty"`
	// Notes explain what the datapath does for this endpoint and why
	// (fallbacks, offload interactions).
	Notes []string `json:"notes,omitempty"`
	// QEMUArgs, for a VM endpoint, are the QEMU options that attach a
	// guest to its tap (model.Endpoint.QEMUArgs).
	QEMUArgs []string        `json:"qemu_args,omitempty"`
	Sent     model.Counter   `json:"sent"`
	Received model.Counter   `json:"received"`
	Reasons  []ReasonCounter `json:"reasons,omitempty"`
}

// NetworkInfo is a network as the API shows it.
type NetworkInfo struct {
	model.Network
	Endpoints int `json:"endpoints"`
}

// Status is the body of GET /v1/status.
type Status struct {
	Version   string `json:"version"`
	StatePath string `json:"state_path"`
	PinDir    string `json:"pin_dir"`
	Uplink    string `json:"uplink,omitempty"`
	// UplinkXDPMode is the attach mode of xlane's XDP program on the
	// uplink: native, generic, offload; "" when none is attached.
	UplinkXDPMode string          `json:"uplink_xdp_mode,omitempty"`
	Modes         []ModeStatus    `json:"modes"`
	Kernel        string          `json:"kernel,omitempty"`
	Features      []Feature       `json:"features,omitempty"` // probed at start (api/kernel.go)
	Networks      int             `json:"networks"`
	Endpoints     int             `json:"endpoints"`
	Counters      []ReasonCounter `json:"counters,omitempty"`
	// Monitor: the programs have the monitor's hooks (xlaned --monitor,
	// on by default); without them `xlane monitor` is refused.
	Monitor bool `json:"monitor"`
	// Services is what the programmed services cost (nil without the
	// BPF datapath).
	Services *ServicesMemory `json:"services,omitempty"`
	// NeighMirror is the state of the node's neighbour table copy the XDP
	// datapath uses (nil without the BPF datapath).
	NeighMirror *NeighMirror `json:"neigh_mirror,omitempty"`
	// Cluster is how this node is joined to others (nil: alone).
	Cluster *ClusterInfo `json:"cluster,omitempty"`
	// Calibration is what auto means on this node (xlane calibrate).
	Calibration *Calibration `json:"calibration,omitempty"`
	// Health says whether the datapath is as it should be.
	Health *Health `json:"health,omitempty"`
	// VM is what VM endpoints can use here (docs/vm.md).
	VM VMStatus `json:"vm"`
	// Hubble is the Hubble server's ring (nil: xlaned runs without
	// --hubble).
	Hubble *HubbleStatus `json:"hubble,omitempty"`
}

// VMStatus says which VM endpoint backends this node offers.
type VMStatus struct {
	QEMU     string   `json:"qemu,omitempty"` // the node's qemu-system-x86_64 --version
	Backends []string `json:"backends"`       // what `endpoint add --vm --backend` takes
	// AFXDP: the node's QEMU has the af-xdp netdev backend; AFXDPReason
	// why an af-xdp port is refused here.
	AFXDP       bool   `json:"af_xdp"`
	AFXDPReason string `json:"af_xdp_reason,omitempty"`
}

// Health is the status' summary of the datapath's state.
type Health struct {
	// OK: nothing in Problems.
	OK bool `json:"ok"`
	// Problems, one line each: programs missing, pins lost, a map nearly
	// full, the conntrack GC behind.
	Problems []string `json:"problems,omitempty"`
	// Programs attached to endpoint devices and the uplink, against what
	// their modes attach.
	Programs ProgramHealth `json:"programs"`
	// Pins of the pinned maps under the pin directory.
	Pins PinHealth `json:"pins"`
	// MapPressure is the fullest map (entries / max_entries).
	MapPressure *MapPressure `json:"map_pressure,omitempty"`
	CTGC        *GCHealth    `json:"ct_gc,omitempty"`
	// LastError is the last warning or error xlaned logged.
	LastError *LastError `json:"last_error,omitempty"`
}

// ProgramHealth counts program attachments.
type ProgramHealth struct {
	Expected int      `json:"expected"`
	Attached int      `json:"attached"`
	Missing  []string `json:"missing,omitempty"` // "DEVICE KIND/HOOK (endpoint ID)"
}

// PinHealth counts the pinned maps' pins.
type PinHealth struct {
	Expected int      `json:"expected"`
	Present  int      `json:"present"`
	Missing  []string `json:"missing,omitempty"`
}

// MapPressure is one map's fill.
type MapPressure struct {
	Map        string  `json:"map"`
	Entries    int     `json:"entries"`
	MaxEntries uint32  `json:"max_entries"`
	Pressure   float64 `json:"pressure"`
}

// GCHealth says whether the conntrack GC keeps up.
type GCHealth struct {
	IntervalSeconds float64    `json:"interval_seconds"`
	Runs            uint64     `json:"runs"`
	LastRun         *time.Time `json:"last_run,omitempty"`
	// LagSeconds: how long past its interval the next pass is overdue.
	LagSeconds float64 `json:"lag_seconds"`
	// Expired entries waiting for a pass.
	Expired int `json:"expired"`
}

// LastError is a warning or error xlaned logged.
type LastError struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// NeighMirror says how closely xlane_neigh follows the kernel's neighbour
// table.
type NeighMirror struct {
	// Events is how many neighbour events were applied.
	Events uint64 `json:"events"`
	// Pending is how many received events wait to be applied (the lag).
	Pending int `json:"pending"`
	// Resyncs counts full resyncs after a lost event (a socket overflow).
	Resyncs    uint64     `json:"resyncs"`
	LastResync *time.Time `json:"last_resync,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
}

// ModeStatus says whether a datapath mode works on this node.
type ModeStatus struct {
	Mode      model.Mode `json:"mode"`
	Available bool       `json:"available"`
	Reason    string     `json:"reason,omitempty"`
}

// Error codes.
const (
	CodeInvalid     = "invalid_argument"
	CodeNotFound    = "not_found"
	CodeConflict    = "conflict"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
	CodeTooLarge    = "too_large" // request body over the path's limit (HTTP 413)
)

// Error is the body of every failed request.
type Error struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// ErrorBody wraps Error on the wire.
type ErrorBody struct {
	Error Error `json:"error"`
}
