package model

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
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
	ModeRequested Mode   `json:"mode_requested,omitempty"`
	ModeReason    string `json:"mode_reason,omitempty"`
	MTU           int    `json:"mtu"`
	// Masquerade: traffic leaving through the uplink gets the node's
	// address (SNAT), as Docker's bridge does. On unless turned off.
	Masquerade bool   `json:"masquerade"`
	Device     string `json:"device"` // holds the gateway addresses
	// DeviceType is the endpoints' device pair (veth, netkit, netkit-l2),
	// never auto; empty in records older than device types: veth.
	DeviceType DeviceType `json:"device_type,omitempty"`
	// Internal: the node routes nothing between the network's subnets and
	// anywhere else (policy rules); its endpoints reach each other and the
	// node only. Docker's --internal.
	Internal bool `json:"internal,omitempty"`
	// ICCOff: the network's endpoints do not reach each other, in any
	// protocol (Docker's enable_icc=false); they still reach the node,
	// the outside and published ports. Enforced by the BPF datapath
	// (XL_EP_NO_ICC): not in kernel mode.
	ICCOff bool `json:"icc_off,omitempty"`
	// Isolated: the network's endpoints and the endpoints of every other
	// network of the node do not reach each other (Docker keeps bridge
	// networks apart so); the node, the outside and published ports
	// still work. Docker networks are isolated, xlane's own networks
	// only when asked. Enforced by the BPF datapath (XL_EP_ISOLATED):
	// not in kernel mode.
	Isolated bool `json:"isolated,omitempty"`
	// AllowUnsolicited: hosts off the node may open flows to the
	// network's endpoints on any port (Docker's gateway_mode_ipv4=
	// nat-unprotected). Off by default: packets from off the node get in
	// only as part of a flow conntrack knows (one an endpoint started, a
	// published port's) or as an ICMP error about one, as on Docker's
	// bridge (XL_EP_ALLOW_UNSOLICITED, bpf/lib/unsolicited.h; nftables in
	// kernel mode).
	AllowUnsolicited bool `json:"allow_unsolicited,omitempty"`
	// VNI is the network's VXLAN network identifier between nodes: the
	// same network name gets the same VNI on every node (DefaultVNI)
	// unless --vni says otherwise; 0 in records older than nodes.
	VNI uint32 `json:"vni,omitempty"`
	// VLAN: the network is on this 802.1Q VLAN of the node's uplink
	// (0: none; docs/multinode.md). Its subnets are routed to the VLAN's
	// port (netconf.VLANNames), the tag pushed and popped by the uplink's
	// tc programs (bpf/lib/vlan.h), which hold the VLAN to the network.
	VLAN uint16 `json:"vlan,omitempty"`
	// BigTCP is what the network asked for (auto, on, off); BigTCP4 and
	// BigTCP6 whether its endpoints' veths aggregate beyond 64 KiB in
	// that family, and BigTCPReason why (internal/daemon/bigtcp.go).
	BigTCP       string    `json:"big_tcp,omitempty"`
	BigTCP4      bool      `json:"big_tcp_ipv4,omitempty"`
	BigTCP6      bool      `json:"big_tcp_ipv6,omitempty"`
	BigTCPReason string    `json:"big_tcp_reason,omitempty"`
	Created      time.Time `json:"created"`
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
	Netns   string        `json:"netns,omitempty"`
	IfName  string        `json:"ifname"`      // name inside the container
	HostIf  string        `json:"host_ifname"` // host-side veth
	PeerIf  string        `json:"peer_ifname"` // container side before it is moved
	MAC     string        `json:"mac"`         // container-side MAC
	HostMAC string        `json:"host_mac"`    // host-side MAC (the gateway MAC)
	IPs     []netip.Addr  `json:"ips"`
	Ports   []PortMapping `json:"ports,omitempty"` // published ports
	// VM: the endpoint is a QEMU guest's port: its host device is a
	// persistent tap (HostIf) that QEMU opens by name, or an AF_XDP port
	// (Backend), with Queues queues;
	// the guest gets its addresses by DHCP from the node (vm.go).
	VM     bool `json:"vm,omitempty"`
	Queues int  `json:"queues,omitempty"`
	// Backend is the VM port's kind: "" (a tap) or BackendAFXDP: then
	// HostIf is the host end of a veth pair and PeerIf, which stays in
	// the node's namespace, the port QEMU's AF_XDP sockets bind to, and
	// XSKMap the pinned socket map QEMU puts them in (vm.go).
	Backend string `json:"backend,omitempty"`
	XSKMap  string `json:"xsk_map,omitempty"`
	// Attachment: the endpoint is a CNI attachment (its ID is
	// AttachmentID of the key); nil for every other endpoint.
	Attachment *Attachment `json:"attachment,omitempty"`
	// Labels are what standalone ClusterNetworkPolicies select the
	// endpoint by (internal/policy; Kubernetes mode selects pods by
	// theirs).
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
}

// PortMapping publishes an endpoint's port on the node's address, or on
// one host address (HostIP: Kubernetes' hostPort with a hostIP).
type PortMapping struct {
	Proto    string `json:"proto"` // tcp or udp
	NodePort uint16 `json:"node_port"`
	Port     uint16 `json:"port"`
	// HostIP is the one address the port is published on; the zero
	// Addr: the node's address (and, for the node's own processes,
	// 127.0.0.1).
	HostIP netip.Addr `json:"host_ip,omitzero"`
}

func (p PortMapping) String() string {
	if p.HostIP.IsValid() {
		return fmt.Sprintf("%s:%d/%s", netip.AddrPortFrom(p.HostIP, p.NodePort), p.Port, p.Proto)
	}
	return fmt.Sprintf("%d:%d/%s", p.NodePort, p.Port, p.Proto)
}

// HostPort is the host side of p: NODEPORT/PROTO, or HOSTIP:NODEPORT/PROTO
// (IPv6 in brackets).
func (p PortMapping) HostPort() string {
	if p.HostIP.IsValid() {
		return fmt.Sprintf("%s/%s", netip.AddrPortFrom(p.HostIP, p.NodePort), p.Proto)
	}
	return fmt.Sprintf("%d/%s", p.NodePort, p.Proto)
}

// SameHostPort says whether p and o hold the same host port: the same
// node port and protocol on the same host address, or on every address
// (no HostIP) and any.
func (p PortMapping) SameHostPort(o PortMapping) bool {
	return p.NodePort == o.NodePort && p.Proto == o.Proto &&
		(!p.HostIP.IsValid() || !o.HostIP.IsValid() || p.HostIP == o.HostIP)
}

// ParsePortMapping reads [HOSTIP:]NODEPORT:PORT[/tcp|udp] (or PORT, same
// on both; an IPv6 HOSTIP in brackets; 0.0.0.0 and :: mean every address).
func ParsePortMapping(s string) (PortMapping, error) {
	pm := PortMapping{Proto: "tcp"}
	bad := Fieldf("ports", "%q: want [HOSTIP:]NODEPORT:PORT[/tcp|udp] with ports 1-65535", s)
	spec, proto, ok := strings.Cut(s, "/")
	if ok {
		if proto != "tcp" && proto != "udp" {
			return pm, Fieldf("ports", "%q: protocol %q is not tcp or udp", s, proto)
		}
		pm.Proto = proto
	}
	node, cport := spec, spec
	if i := strings.LastIndex(spec, ":"); i >= 0 {
		node, cport = spec[:i], spec[i+1:]
		if strings.ContainsAny(node, ":]") {
			hp, err := netip.ParseAddrPort(node)
			if err != nil {
				return pm, bad
			}
			if !hp.Addr().IsUnspecified() {
				pm.HostIP = hp.Addr().Unmap()
			}
			node = strconv.Itoa(int(hp.Port()))
		}
	}
	np, err1 := strconv.ParseUint(node, 10, 16)
	cp, err2 := strconv.ParseUint(cport, 10, 16)
	if err1 != nil || err2 != nil || np == 0 || cp == 0 {
		return pm, bad
	}
	pm.NodePort, pm.Port = uint16(np), uint16(cp)
	return pm, nil
}

// VethOnly reports whether the runtime, not xlane, moves and configures the
// container side.
func (e *Endpoint) VethOnly() bool { return e.Netns == "" && !e.VM }

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

// Error is the field's name and the reason; a reason that starts with the
// name already (accel's "cgroup /x: no such file or directory") is not
// prefixed again: it read "cgroup cgroup /x: ...".
func (e *FieldError) Error() string {
	if rest, ok := strings.CutPrefix(e.Reason, e.Field); ok && e.Field != "" && (rest == "" || rest[0] == ' ' || rest[0] == ':') {
		return e.Reason
	}
	return e.Field + " " + e.Reason
}

// Fieldf builds a FieldError: Fieldf("subnets", "%q: invalid prefix length", s)
// reads `subnets "10.0.0.0/33": invalid prefix length`. field is the
// request's JSON key (TestFieldNamesAreJSONKeys).
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

// IndexedField puts LIST[i]. before the field of a field error (and
// LIST[i]: before any other error): the error of one element of a list
// (services[3].vip).
func IndexedField(list string, i int, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return Fieldf(fmt.Sprintf("%s[%d].%s", list, i, fe.Field), "%s", fe.Reason)
	}
	return fmt.Errorf("%s[%d]: %w", list, i, err)
}
