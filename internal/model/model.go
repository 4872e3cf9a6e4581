package model

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Mode is a network's datapath mode.
type Mode string

const (
	// ModeKernel is plain Linux routing between host-side veths: no BPF.
	ModeKernel Mode = "kernel"
	// ModeTC is tcx programs on host-side veths: bpf_redirect_peer between
	// local endpoints, FIB + bpf_redirect(_neigh) for the rest.
	ModeTC Mode = "tc"
	// ModeXDP is native XDP on host-side veths: XDP_REDIRECT through a
	// devmap to the destination veth or the uplink.
	ModeXDP Mode = "xdp"
	// ModeXDPGeneric is the same program attached as generic (skb) XDP.
	ModeXDPGeneric Mode = "xdp-generic"
	// ModeAuto asks the daemon for the mode that measured fastest and
	// correct on this kernel (see daemon.AutoMode); it is resolved when the
	// network is created or updated.
	ModeAuto Mode = "auto"
)

// Modes lists the modes a network can ask for, default first.
var Modes = []Mode{ModeAuto, ModeTC, ModeKernel, ModeXDP, ModeXDPGeneric}

// BPF reports whether the mode runs BPF programs.
func (m Mode) BPF() bool { return m != ModeKernel }

// XDP reports whether the mode attaches XDP programs.
func (m Mode) XDP() bool { return m == ModeXDP || m == ModeXDPGeneric }

// DefaultMode is the mode of a network created without --mode.
const DefaultMode = ModeAuto

// ParseMode validates a mode name; "" is the default.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return DefaultMode, nil
	}
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", Fieldf("mode", "%q: unknown mode (want one of %v)", s, Modes)
}

// Network is a set of endpoints sharing subnets and a gateway on the node.
type Network struct {
	Name     string         `json:"name"`
	ID       uint32         `json:"id"`
	Subnets  []netip.Prefix `json:"subnets"`
	Gateways []netip.Addr   `json:"gateways"` // one per subnet, same order
	Mode     Mode           `json:"mode"`     // the mode in force, never auto
	// ModeRequested is what the network asked for (auto or a mode), and
	// ModeReason why Mode was chosen when it was auto.
	ModeRequested Mode      `json:"mode_requested,omitempty"`
	ModeReason    string    `json:"mode_reason,omitempty"`
	MTU           int       `json:"mtu"`
	Device        string    `json:"device"` // holds the gateway addresses
	Created       time.Time `json:"created"`
}

// Subnet4 returns the network's IPv4 subnet and gateway, if any.
func (n *Network) Subnet4() (netip.Prefix, netip.Addr, bool) { return n.subnet(true) }

// Subnet6 returns the network's IPv6 subnet and gateway, if any.
func (n *Network) Subnet6() (netip.Prefix, netip.Addr, bool) { return n.subnet(false) }

func (n *Network) subnet(v4 bool) (netip.Prefix, netip.Addr, bool) {
	for i, p := range n.Subnets {
		if p.Addr().Is4() == v4 {
			return p, n.Gateways[i], true
		}
	}
	return netip.Prefix{}, netip.Addr{}, false
}

// Endpoint is one interface of a container attached to a network.
type Endpoint struct {
	ID      string `json:"id"`
	Network string `json:"network"`
	// Netns is the container's network namespace path; empty for a
	// veth-only endpoint whose runtime moves the interface itself.
	Netns   string       `json:"netns,omitempty"`
	IfName  string       `json:"ifname"`      // name inside the container
	HostIf  string       `json:"host_ifname"` // host-side veth
	PeerIf  string       `json:"peer_ifname"` // container side before it is moved
	MAC     string       `json:"mac"`         // container-side MAC
	HostMAC string       `json:"host_mac"`    // host-side MAC (the gateway MAC)
	IPs     []netip.Addr `json:"ips"`
	Created time.Time    `json:"created"`
}

// VethOnly reports whether the runtime, not xlane, moves and configures the
// container side.
func (e *Endpoint) VethOnly() bool { return e.Netns == "" }

// Sentinel errors, tested with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the request is valid but this node cannot serve it
	// (a kernel feature is missing).
	ErrUnavailable = errors.New("unavailable")
)

// FieldError says which input field is wrong and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Reason }

// Fieldf builds a FieldError: Fieldf("subnet", "%q: invalid prefix length", s)
// reads `subnet "10.0.0.0/33": invalid prefix length`.
func Fieldf(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// NotFoundf wraps ErrNotFound with what was not found.
func NotFoundf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrNotFound)
}

// Conflictf wraps ErrConflict with what conflicts.
func Conflictf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrConflict)
}
