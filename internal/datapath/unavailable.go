package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// ErrUnavailable: the BPF datapath does not load on this node (no BPF
// filesystem, a kernel that refuses the programs, no privileges). It wraps
// model.ErrUnavailable, so the API answers it as such.
var ErrUnavailable = fmt.Errorf("the BPF datapath does not load here: %w", model.ErrUnavailable)

// Unavailable is the datapath of a node where BPF cannot load: only
// kernel mode runs. Whatever would change the datapath fails with
// ErrUnavailable, wrapped with what was asked and why BPF did not load;
// removals succeed and listings are empty, since nothing of xlane's can be
// in a datapath that never loaded.
type Unavailable struct {
	why error
}

// NewUnavailable returns the datapath of a node where Open failed with why.
func NewUnavailable(why error) *Unavailable {
	if why == nil {
		why = errors.New("not loaded")
	}
	return &Unavailable{why: why}
}

func (u *Unavailable) err(what string) error {
	return fmt.Errorf("%s: %w (%w)", what, ErrUnavailable, u.why)
}

// Available says why the datapath is not available.
func (u *Unavailable) Available() error { return fmt.Errorf("%w (%w)", ErrUnavailable, u.why) }

func (u *Unavailable) XDPErr() error                                         { return u.err("xdp programs") }
func (u *Unavailable) UseLegacyTC(bool) error                                { return u.err("legacy tc") }
func (u *Unavailable) LegacyTC() bool                                        { return false }
func (u *Unavailable) Close() error                                          { return nil }
func (u *Unavailable) Hooks(string) []string                                 { return nil }
func (u *Unavailable) OwnsXDP(string) bool                                   { return false }
func (u *Unavailable) Detach(string, int) error                              { return nil }
func (u *Unavailable) DeleteEndpoint(netip.Addr) error                       { return nil }
func (u *Unavailable) DeleteNeigh(netip.Addr, int) error                     { return nil }
func (u *Unavailable) Neigh(netip.Addr, int) (net.HardwareAddr, bool, error) { return nil, false, nil }
func (u *Unavailable) FlushNeigh() error                                     { return nil }
func (u *Unavailable) DeletePort(Port) error                                 { return nil }
func (u *Unavailable) DeleteService(model.Service) error                     { return nil }
func (u *Unavailable) DeleteServices([]model.Service) error                  { return nil }
func (u *Unavailable) ServicesMemory() (ServicesMemory, error)               { return ServicesMemory{}, nil }
func (u *Unavailable) PruneCounters(map[int]bool) error                      { return nil }

func (u *Unavailable) AttachedDevices() ([]string, error)                 { return nil, nil }
func (u *Unavailable) VMPorts() ([]string, error)                         { return nil, nil }
func (u *Unavailable) DetachVMPort(string) error                          { return nil }
func (u *Unavailable) AttachVMPort(string, int) (string, error)           { return "", u.err("vm port") }
func (u *Unavailable) EndpointAddrs() ([]netip.Addr, error)               { return nil, nil }
func (u *Unavailable) PublishedPorts() ([]Port, error)                    { return nil, nil }
func (u *Unavailable) ServiceIDs() (map[uint32]model.Service, error)      { return nil, nil }
func (u *Unavailable) Counters(int) (map[CounterKey]model.Counter, error) { return nil, nil }
func (u *Unavailable) MapUsage(map[string]int) ([]MapUsage, error)        { return nil, nil }
func (u *Unavailable) ProgramStats() ([]ProgramStats, error)              { return nil, nil }
func (u *Unavailable) DumpNames() []string                                { return nil }
func (u *Unavailable) ExpectedHooks(model.Mode, bool) []string            { return nil }
func (u *Unavailable) UplinkHooks(string) (expected, present []string)    { return nil, nil }
func (u *Unavailable) MissingPins() (int, []string)                       { return 0, nil }

func (u *Unavailable) DumpMap(name string, _ int) (*MapDump, error) {
	return nil, u.err("dump map " + name)
}

func (u *Unavailable) CountersByIfindex() (map[int]map[CounterKey]model.Counter, error) {
	return nil, nil
}

func (u *Unavailable) Attach(ifname string, _ int, mode model.Mode) error {
	return u.err(fmt.Sprintf("attach %s programs to %s", mode, ifname))
}

func (u *Unavailable) AttachNetkit(ifname string, _ int) error {
	return u.err("attach netkit programs to " + ifname)
}

func (u *Unavailable) PutEndpoint(addr netip.Addr, _ model.EndpointEntry) error {
	return u.err("put endpoint " + addr.String())
}

func (u *Unavailable) Endpoint(addr netip.Addr) (model.EndpointEntry, error) {
	return model.EndpointEntry{}, u.err("endpoint " + addr.String())
}

func (u *Unavailable) PutNeigh(addr netip.Addr, _ int, _ net.HardwareAddr) error {
	return u.err("put neighbour " + addr.String())
}

func (u *Unavailable) AttachUplink(ifname string, _ int, _ uint32, _ bool, _ string) (string, error) {
	return "", u.err("attach uplink program to " + ifname)
}

func (u *Unavailable) EnsureUplinkXDP() error { return nil } // nothing attached: nothing deferred

func (u *Unavailable) AttachUplinkTC(ifname string, _ int) error {
	return u.err("attach uplink tc program to " + ifname)
}

func (u *Unavailable) SetConfig(NodeConfig) error      { return u.err("write datapath config") }
func (u *Unavailable) AttachSockLB(string) error       { return u.err("attach socket load balancing") }
func (u *Unavailable) EnableAccel(AccelSettings) error { return u.err("enable socket acceleration") }
func (u *Unavailable) DisableAccel() error             { return nil }
func (u *Unavailable) AccelStatus() (AccelStatus, error) {
	return AccelStatus{}, u.err("socket acceleration")
}
func (u *Unavailable) AttachProxy(string) error                  { return u.err("attach proxy redirect") }
func (u *Unavailable) DetachProxy(uint64) error                  { return nil }
func (u *Unavailable) ProxyCgroups() ([]uint64, error)           { return nil, nil }
func (u *Unavailable) PutProxyRule(ProxyRule) error              { return u.err("proxy redirect") }
func (u *Unavailable) DeleteProxyRule(uint16) error              { return nil }
func (u *Unavailable) ProxyRules() (map[uint16]ProxyRule, error) { return nil, nil }
func (u *Unavailable) ProxyStats() (map[string]uint64, error)    { return nil, u.err("proxy redirect") }
func (u *Unavailable) AttachProxyIn(string, uint64) error {
	return u.err("attach inbound proxy redirect")
}
func (u *Unavailable) DetachProxyIn(uint64) error               { return nil }
func (u *Unavailable) ProxyInNetns() ([]uint64, error)          { return nil, nil }
func (u *Unavailable) PutProxyInRule(ProxyInRule) error         { return u.err("proxy redirect") }
func (u *Unavailable) DeleteProxyInRule(ProxyInRule) error      { return nil }
func (u *Unavailable) ProxyInRules() ([]ProxyInRule, error)     { return nil, nil }
func (u *Unavailable) ProxyListener(uint64, uint16, uint8) bool { return false }
func (u *Unavailable) PutProxyListener(uint64, uint16, uint8, int) error {
	return u.err("proxy redirect")
}
func (u *Unavailable) PutPort(p Port) error {
	return u.err(fmt.Sprintf("publish %d/%d", p.NodePort, p.Proto))
}
func (u *Unavailable) Flows(int) ([]model.Flow, error) { return nil, u.err("conntrack") }
func (u *Unavailable) FlushCT() (int, error)           { return 0, u.err("conntrack") }
func (u *Unavailable) CTStats() (CTStats, error)       { return CTStats{}, u.err("conntrack") }
func (u *Unavailable) GCCT(uint64, func(model.Flow)) (int, error) {
	return 0, u.err("conntrack gc")
}
func (u *Unavailable) PutService(s model.Service) error {
	return u.err(fmt.Sprintf("service %d", s.ID))
}
func (u *Unavailable) PutServices(s []model.Service) error {
	if len(s) == 0 {
		return nil
	}
	return u.err(fmt.Sprintf("%d services", len(s)))
}
func (u *Unavailable) FirewallMaps() (bpf.FwMaps, error) { return bpf.FwMaps{}, u.err("firewall maps") }

func (u *Unavailable) PutPeer(p Peer) error               { return u.err("put peer " + p.Prefix.String()) }
func (u *Unavailable) DeletePeer(netip.Prefix) error      { return nil }
func (u *Unavailable) Peers() ([]Peer, error)             { return nil, nil }
func (u *Unavailable) SetNetworkVNI(_, _ uint32) error    { return u.err("set network vni") }
func (u *Unavailable) DeleteNetworkVNI(_, _ uint32) error { return nil }
func (u *Unavailable) PutVLAN(VLAN, string) error         { return u.err("put vlan") }
func (u *Unavailable) DeleteVLAN(uint16, string) error    { return nil }
func (u *Unavailable) VLANs() ([]VLAN, error)             { return nil, nil }
func (u *Unavailable) AttachOverlay(ifname string, _ int) error {
	return u.err("attach overlay programs to " + ifname)
}
func (u *Unavailable) DetachOverlay(string) error { return nil }
func (u *Unavailable) SetOverlayEncap(OverlayEncap) error {
	return u.err("set overlay encapsulation")
}
func (u *Unavailable) DeleteFlowsOf([]netip.Prefix) (int, error) { return 0, nil }
func (u *Unavailable) MonitorMaps() (bpf.MonitorMaps, error) {
	return bpf.MonitorMaps{}, u.err("monitor maps")
}
func (u *Unavailable) NewTracer() (*bpf.Tracer, error) { return nil, u.err("trace") }
