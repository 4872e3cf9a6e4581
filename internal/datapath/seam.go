package datapath

import (
	"net"
	"net/netip"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// Datapath is what the daemon needs of the datapath: the seam between the
// control plane (internal/daemon) and the BPF objects. *BPF implements it
// where the programs load; Unavailable where they do not (every change
// fails with ErrUnavailable, every removal and listing finds nothing); the
// daemon's tests use a fake (datapathtest.Fake). Pin layout, map keys and
// program attachment stay behind it.
type Datapath interface {
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

	// Endpoint devices (datapath.go, legacytc.go, netkit.go).
	Attach(ifname string, ifindex int, mode model.Mode) error
	AttachNetkit(ifname string, ifindex int) error
	Detach(ifname string, ifindex int) error
	Hooks(ifname string) []string
	AttachedDevices() ([]string, error)
	// AF_XDP VM ports (vmport.go): the program and socket map of a
	// port device; AttachVMPort returns the map's pin (QEMU's map-path=).
	AttachVMPort(ifname string, ifindex int) (string, error)
	DetachVMPort(ifname string) error
	VMPorts() ([]string, error)

	// The endpoint map.
	PutEndpoint(addr netip.Addr, v bpf.EndpointVal) error
	Endpoint(addr netip.Addr) (bpf.EndpointVal, error)
	DeleteEndpoint(addr netip.Addr) error
	EndpointAddrs() ([]netip.Addr, error)

	// Counters (datapath.go).
	Counters(ifindex int) (map[CounterKey]Counter, error)
	CountersByIfindex() (map[int]map[CounterKey]Counter, error)
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

	// The neighbour mirror of the XDP datapath (datapath.go, neigh.go).
	PutNeigh(addr netip.Addr, ifindex int, mac net.HardwareAddr) error
	DeleteNeigh(addr netip.Addr, ifindex int) error
	Neigh(addr netip.Addr, ifindex int) (mac net.HardwareAddr, ok bool, err error)
	FlushNeigh() error

	// The node: uplink programs (datapath.go), node configuration, the
	// uplink's tc program and the socket hooks (node.go).
	OwnsXDP(ifname string) bool
	AttachUplink(ifname string, ifindex int, foreignProgID uint32, takeover bool, mode string) (string, error)
	AttachUplinkTC(ifname string, ifindex int) error
	SetConfig(c NodeConfig) error
	AttachSockLB(cgroupPath string) error

	// The socket layer (accel.go, proxy.go): acceleration and transparent proxy
	// redirect, attached to cgroups.
	EnableAccel(s AccelSettings) error
	DisableAccel() error
	AccelStatus() (AccelStatus, error)
	AttachProxy(cgroupPath string) error
	DetachProxy(cgroupID uint64) error
	ProxyCgroups() ([]uint64, error)
	PutProxyRule(r ProxyRule) error
	DeleteProxyRule(port uint16) error
	ProxyRules() (map[uint16]ProxyRule, error)
	ProxyStats() (map[string]uint64, error)
	// Inbound redirects: sk_lookup per network namespace (cookie).
	AttachProxyIn(netnsPath string, netns uint64) error
	DetachProxyIn(netns uint64) error
	ProxyInNetns() ([]uint64, error)
	PutProxyInRule(r ProxyInRule) error
	DeleteProxyInRule(r ProxyInRule) error
	ProxyInRules() ([]ProxyInRule, error)
	PutProxyListener(netns uint64, port uint16, family uint8, fd int) error
	ProxyListener(netns uint64, port uint16, family uint8) bool

	// Published ports (ports.go).
	PutPort(p Port) error
	DeletePort(p Port) error
	PublishedPorts() ([]Port, error)

	// Conntrack: reading and flushing (flows.go), collecting (ctgc.go).
	Flows(limit int) ([]Flow, error)
	FlushCT() (int, error)
	CTStats() (CTStats, error)
	GCCT(graceNanos uint64, collected func(*bpf.CTKey, *bpf.CTVal)) (int, error)

	// Services (services.go).
	PutService(s Service) error
	DeleteService(s Service) error
	// PutServices and DeleteServices are the batched forms: on error,
	// part may be applied (the caller puts back what was).
	PutServices(s []Service) error
	DeleteServices(s []Service) error
	ServicesMemory() (ServicesMemory, error)
	ServiceIDs() (map[uint32]Service, error)

	// Nodes (overlay.go): the cluster's prefixes, the networks' VNIs,
	// the VXLAN device's programs, a removed node's flows.
	PutPeer(p Peer) error
	DeletePeer(p netip.Prefix) error
	Peers() ([]Peer, error)
	SetNetworkVNI(networkID, vni uint32) error
	DeleteNetworkVNI(networkID, vni uint32) error
	AttachOverlay(ifname string, ifindex int) error
	DetachOverlay(ifname string) error
	SetOverlayEncap(e OverlayEncap) error
	DeleteFlowsOf(prefixes []netip.Prefix) (int, error)

	// VLAN networks (vlan.go): each VLAN's network, uplink and port.
	PutVLAN(v VLAN, portName string) error
	DeleteVLAN(id uint16, portName string) error
	VLANs() ([]VLAN, error)

	// FirewallMaps are the firewall's maps (bpf/lib/fw.h), for
	// internal/firewall's installer. They stay the datapath's: Close
	// releases them.
	FirewallMaps() (bpf.FwMaps, error)

	// MonitorMaps are the event monitor's maps (bpf/lib/monitor.h): its
	// switch, counters and ring, for the daemon's monitor.
	MonitorMaps() (bpf.MonitorMaps, error)
	// NewTracer loads a copy of the tc programs on the live configuration
	// and a copy of the state, for `xlane trace` (bpf.Tracer). The caller
	// closes it.
	NewTracer() (*bpf.Tracer, error)
}

var (
	_ Datapath = (*BPF)(nil)
	_ Datapath = (*Unavailable)(nil)
)
