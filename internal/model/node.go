package model

import (
	"hash/fnv"
	"net/netip"
	"time"
)

// Routing is how a cluster's nodes carry pod traffic between them.
type Routing string

const (
	// RoutingVXLAN tunnels pod traffic through xlaned's collect_md VXLAN
	// device (UDP 4789 over the underlay), a VNI per network.
	RoutingVXLAN Routing = "vxlan"
	// RoutingNative routes each peer's pod CIDRs through its underlay
	// address: no encapsulation; the nodes share an L2 underlay (or its
	// routers know the pod CIDRs).
	RoutingNative Routing = "native"
)

// ParseRouting validates a routing name; "" is vxlan.
func ParseRouting(s string) (Routing, error) {
	switch Routing(s) {
	case "", RoutingVXLAN:
		return RoutingVXLAN, nil
	case RoutingNative:
		return RoutingNative, nil
	}
	return "", Fieldf("routing", "%q: want vxlan or native", s)
}

// Encap is how a node puts pod traffic on the VXLAN overlay (xlaned
// --overlay-encap). Either way the receiving node decapsulates in its
// VXLAN device (its UDP socket gives VXLAN GRO), so nodes of either kind
// interoperate.
type Encap string

const (
	// EncapBPF pushes the outer headers in the endpoint's tc program and
	// redirects to the underlay device (bpf/lib/overlay_encap.h).
	EncapBPF Encap = "bpf"
	// EncapDevice sets the tunnel key and redirects to the collect_md
	// VXLAN device, which encapsulates.
	EncapDevice Encap = "device"
	// EncapAuto is what measured faster here (docs/multinode.md).
	EncapAuto Encap = "auto"
)

// EncapAutoChoice is what auto resolves to: the winner of bench/multinode
// scenario 2's interleaved comparison (docs/multinode.md).
const EncapAutoChoice = EncapBPF

// ParseEncap validates an encapsulation name and resolves auto ("" is
// auto).
func ParseEncap(s string) (Encap, error) {
	switch Encap(s) {
	case "", EncapAuto:
		return EncapAutoChoice, nil
	case EncapBPF, EncapDevice:
		return Encap(s), nil
	}
	return "", Fieldf("overlay-encap", "%q: want bpf, device or auto", s)
}

// Node is one xlaned of the cluster: this one (Self) or a peer.
type Node struct {
	Name string `json:"name"`
	ID   uint32 `json:"id"`
	// Underlay holds the node's addresses on the network between nodes,
	// at most one IPv4 and one IPv6; tunnels and native routes use the
	// family this node's own underlay has (IPv4 first).
	Underlay []netip.Addr `json:"underlay"`
	// PodCIDRs are the node's pod prefixes, at most one per family,
	// inside the cluster CIDR; its networks take their subnets there.
	PodCIDRs []netip.Prefix `json:"pod_cidrs"`
	// MTU is the node's underlay MTU as its record says (0: not said).
	MTU int `json:"mtu,omitempty"`
	// WGPublicKey is the node's WireGuard public key (base64; "": none
	// given, encryption off). This node's own is its daemon's.
	WGPublicKey string `json:"wg_public_key,omitempty"`
	// Self: the node this daemon runs (--node-name).
	Self    bool      `json:"self,omitempty"`
	Created time.Time `json:"created"`
	// Liveness is this daemon's view of a peer (its probes, not stored:
	// the API fills it in); nil for this node, or without probing.
	Liveness *NodeLiveness `json:"liveness,omitempty"`
	// Encryption is this daemon's WireGuard session with a peer (not
	// stored: the API fills it in); nil for this node, or without
	// encryption.
	Encryption *NodeEncryption `json:"encryption,omitempty"`
}

// NodeEncryption is a peer's WireGuard session as this node sees it
// (internal/wireguard).
type NodeEncryption struct {
	// State is what the peer's pods' traffic does: encrypted, pending
	// (waits in WireGuard for the first handshake), dropped (no working
	// session, --encryption-strict) or cleartext (no working session:
	// the overlay unencrypted); Reason why it is not encrypted
	// (no_handshake, session_expired, not_on_device), Detail in words.
	State         string     `json:"state"`
	Reason        string     `json:"reason,omitempty"`
	Detail        string     `json:"detail,omitempty"`
	LastHandshake *time.Time `json:"last_handshake,omitempty"`
	RxBytes       uint64     `json:"rx_bytes"`
	TxBytes       uint64     `json:"tx_bytes"`
}

// NodeLiveness is what a daemon's probes of a peer's underlay address
// found (internal/cluster/peerprobe.go).
type NodeLiveness struct {
	// State is up (answering, or not yet found silent) or down (no
	// answer for three probe intervals: its pods' packets are dropped,
	// drop_peer_down).
	State string `json:"state"`
	// Address is the underlay address probed.
	Address netip.Addr `json:"address"`
	// Since is when the state began (the probing, for up).
	Since time.Time `json:"since"`
	// LastReply is the last answer's time (zero: none yet).
	LastReply time.Time `json:"last_reply,omitempty"`
}

// Liveness states.
const (
	PeerUp   = "up"
	PeerDown = "down"
)

// PodCIDR returns the node's pod CIDR of one family.
func (n *Node) PodCIDR(v4 bool) (netip.Prefix, bool) {
	for _, p := range n.PodCIDRs {
		if p.Addr().Is4() == v4 {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// UnderlayOf returns the node's underlay address of one family.
func (n *Node) UnderlayOf(v4 bool) (netip.Addr, bool) {
	for _, a := range n.Underlay {
		if a.Is4() == v4 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// VNI bounds: 1 is the node's own traffic (datapath.VNINode); networks
// take 2 to 2^24-1.
const (
	MinVNI = 2
	MaxVNI = 1<<24 - 1
)

// DefaultVNI derives a network's VNI from its name, so that every node
// gives a network of the same name the same VNI without talking to the
// others (FNV-1a into 2..2^24-1). --vni overrides it.
func DefaultVNI(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return MinVNI + h.Sum32()%(MaxVNI-MinVNI+1)
}
