package datapath

import (
	"net"
	"net/netip"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// Datapath is what the daemon needs of the datapath: the seam between the
// control plane (internal/daemon) and the BPF objects, composed of one
// role interface per concern below, each taking model types (map keys,
// values and flag encodings stay behind it). *BPF implements it where the
// programs load; Unavailable where they do not (every change fails with
// ErrUnavailable, every removal and listing finds nothing); the daemon's
// tests use a fake (datapathtest.Fake), which embeds Unavailable and
// overrides only what it models. A feature takes the role it needs, not
// the whole Datapath.
//
// A new operation goes into its role, *BPF and Unavailable; the fake
// models it only when a test needs it.
type Datapath interface {
	Runtime
	Devices
	VMPorts
	Endpoints
	Neighbours
	Observe
	Node
	Accel
	Proxy
	Ports
	Conntrack
	Services
	Overlay
	VLANs
	Firewall
}

// Runtime is the datapath's own state: whether it runs here, in which
// flavour, and closing it.
type Runtime interface {
	// Available is nil, or why the BPF datapath does not run here
	// (wrapping ErrUnavailable).
	Available() error
	// XDPErr says why the XDP modes cannot run here, or nil.
	XDPErr() error
	// UseLegacyTC makes tc mode attach cls_bpf filters instead of tcx
	// links (kernels without tcx).
	UseLegacyTC(on bool) error
	LegacyTC() bool
	Close() error
}

// Devices are the endpoints' host devices and their programs
// (datapath.go, legacytc.go, netkit.go).
type Devices interface {
	Attach(ifname string, ifindex int, mode model.Mode) error
	AttachNetkit(ifname string, ifindex int) error
	Detach(ifname string, ifindex int) error
	Hooks(ifname string) []string
	AttachedDevices() ([]string, error)
}

// VMPorts are AF_XDP VM ports (vmport.go): the program and socket map of
// a port device; AttachVMPort returns the map's pin (QEMU's map-path=).
type VMPorts interface {
	AttachVMPort(ifname string, ifindex int) (string, error)
	DetachVMPort(ifname string) error
	VMPorts() ([]string, error)
}

// Endpoints is the endpoint map: how the programs reach each endpoint
// address and what they apply to its traffic (endpoints.go).
type Endpoints interface {
	PutEndpoint(addr netip.Addr, e model.EndpointEntry) error
	Endpoint(addr netip.Addr) (model.EndpointEntry, error)
	DeleteEndpoint(addr netip.Addr) error
	EndpointAddrs() ([]netip.Addr, error)
}

// Neighbours is the neighbour mirror of the XDP datapath (datapath.go,
// neigh.go).
type Neighbours interface {
	PutNeigh(addr netip.Addr, ifindex int, mac net.HardwareAddr) error
	DeleteNeigh(addr netip.Addr, ifindex int) error
	Neigh(addr netip.Addr, ifindex int) (mac net.HardwareAddr, ok bool, err error)
	FlushNeigh() error
}

// Observe is what the datapath tells about itself: counters, map fill
// and program cost, maps in readable form, health, the event monitor and
// the tracer.
type Observe interface {
	// Counters (datapath.go).
	Counters(ifindex int) (map[CounterKey]model.Counter, error)
	CountersByIfindex() (map[int]map[CounterKey]model.Counter, error)
	PruneCounters(keep map[int]bool) error

	// Inventory (inventory.go): how full the maps are, what the programs
	// cost (with BPF run statistics on).
	MapUsage(known map[string]int) ([]MapUsage, error)
	ProgramStats() ([]ProgramStats, error)

	// Maps in readable form (dump.go): DumpNames lists what DumpMap
	// takes; an unknown name fails with ErrNoSuchMap naming them.
	DumpNames() []string
	DumpMap(name string, limit int) (*MapDump, error)

	// Health (health.go): the hooks a device should carry, the uplink's,
	// the pinned maps whose pins went missing.
	ExpectedHooks(mode model.Mode, netkit bool) []string
	UplinkHooks(ifname string) (expected, present []string)
	MissingPins() (pinned int, missing []string)

	// MonitorMaps are the event monitor's maps (bpf/lib/monitor.h): its
	// switch, counters and ring, for the daemon's monitor.
	MonitorMaps() (bpf.MonitorMaps, error)
	// NewTracer loads a copy of the tc programs on the live configuration
	// and a copy of the state, for `xlane trace` (bpf.Tracer). The caller
	// closes it.
	NewTracer() (*bpf.Tracer, error)
}

// Node is the node's own hooks and configuration: uplink programs
// (datapath.go), node configuration, the uplink's tc program and the
// socket load-balancing hooks (node.go).
type Node interface {
	OwnsXDP(ifname string) bool
	AttachUplink(ifname string, ifindex int, foreignProgID uint32, takeover bool, mode string) (string, error)
	// EnsureUplinkXDP attaches the uplink program (generic) where auto
	// left the uplink without one (datapath.AutoXDPMode): the firewall's
	// uplink stage runs in it.
	EnsureUplinkXDP() error
	AttachUplinkTC(ifname string, ifindex int) error
	SetConfig(c NodeConfig) error
	AttachSockLB(cgroupPath string) error
}

// Accel is socket acceleration (accel.go): sockops and sk_msg programs
// attached to a cgroup.
type Accel interface {
	EnableAccel(s AccelSettings) error
	DisableAccel() error
	AccelStatus() (AccelStatus, error)
}

// Proxy is transparent proxy redirect (proxy.go): outbound by cgroup
// connect hooks, inbound by sk_lookup per network namespace (cookie).
type Proxy interface {
	AttachProxy(cgroupPath string) error
	DetachProxy(cgroupID uint64) error
	ProxyCgroups() ([]uint64, error)
	PutProxyRule(r ProxyRule) error
	DeleteProxyRule(port uint16) error
	ProxyRules() (map[uint16]ProxyRule, error)
	ProxyStats() (map[string]uint64, error)
	AttachProxyIn(netnsPath string, netns uint64) error
	DetachProxyIn(netns uint64) error
	ProxyInNetns() ([]uint64, error)
	PutProxyInRule(r ProxyInRule) error
	DeleteProxyInRule(r ProxyInRule) error
	ProxyInRules() ([]ProxyInRule, error)
	PutProxyListener(netns uint64, port uint16, family uint8, fd int) error
	ProxyListener(netns uint64, port uint16, family uint8) bool
}

// Ports are the published ports (ports.go).
type Ports interface {
	PutPort(p Port) error
	DeletePort(p Port) error
	PublishedPorts() ([]Port, error)
}

// Conntrack is reading and flushing the flow table (flows.go) and
// collecting it (ctgc.go).
type Conntrack interface {
	Flows(limit int) ([]model.Flow, error)
	FlushCT() (int, error)
	CTStats() (CTStats, error)
	// GCCT deletes the entries expired more than graceNanos ago;
	// collected, if not nil, is given each before it goes.
	GCCT(graceNanos uint64, collected func(model.Flow)) (int, error)
}

// Services are the service VIPs and their Maglev tables (services.go).
type Services interface {
	PutService(s model.Service) error
	DeleteService(s model.Service) error
	// PutServices and DeleteServices are the batched forms: on error,
	// part may be applied (the caller puts back what was).
	PutServices(s []model.Service) error
	DeleteServices(s []model.Service) error
	ServicesMemory() (ServicesMemory, error)
	// ServiceIDs lists the programmed services (ID, VIP, protocol).
	ServiceIDs() (map[uint32]model.Service, error)
}

// Overlay is the cluster's nodes (overlay.go): their prefixes, the
// networks' VNIs, the VXLAN device's programs, a removed node's flows.
type Overlay interface {
	PutPeer(p Peer) error
	DeletePeer(p netip.Prefix) error
	Peers() ([]Peer, error)
	SetNetworkVNI(networkID, vni uint32) error
	DeleteNetworkVNI(networkID, vni uint32) error
	AttachOverlay(ifname string, ifindex int) error
	DetachOverlay(ifname string) error
	SetOverlayEncap(e OverlayEncap) error
	DeleteFlowsOf(prefixes []netip.Prefix) (int, error)
}

// VLANs are the VLAN networks (vlan.go): each VLAN's network, uplink and
// port.
type VLANs interface {
	PutVLAN(v VLAN, portName string) error
	DeleteVLAN(id uint16, portName string) error
	VLANs() ([]VLAN, error)
}

// Firewall hands the firewall's maps (bpf/lib/fw.h) to
// internal/firewall's installer. They stay the datapath's: Close
// releases them.
type Firewall interface {
	FirewallMaps() (bpf.FwMaps, error)
}

var (
	_ Datapath = (*BPF)(nil)
	_ Datapath = (*Unavailable)(nil)
)
