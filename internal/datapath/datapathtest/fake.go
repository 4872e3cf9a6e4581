package datapathtest

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sort"
	"sync"

	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
)

// ErrFake is what Fail usually returns in tests.
var ErrFake = errors.New("fake datapath: injected failure")

// PortKey is what xlane_publish is keyed by: the host address (invalid:
// every address), a node port, its protocol and the family of the
// endpoint address.
type PortKey struct {
	HostIP   netip.Addr
	Proto    uint8
	NodePort uint16
	V4       bool
}

type neighKey struct {
	addr    netip.Addr
	ifindex int
}

// Fake is an in-memory datapath. The zero value is not usable: use New.
type Fake struct {
	// What the fake does not model: removals and listings find
	// nothing, changes fail with datapath.ErrUnavailable.
	*datapath.Unavailable

	mu sync.Mutex
	// Fail, when set, is asked before every change, with the operation's
	// name ("put-service", "put-port", ...) and its argument. A non-nil
	// error fails the operation; with FailAfterWrite the change is made
	// first (as a real map update can fail half-way).
	Fail           func(op string, arg any) error
	FailAfterWrite bool

	endpoints  map[netip.Addr]model.EndpointEntry
	devices    map[string]model.Mode // attached host devices -> mode ("netkit": netkit)
	ports      map[PortKey]datapath.Port
	services   map[uint32]model.Service
	neigh      map[neighKey]net.HardwareAddr
	config     datapath.NodeConfig
	legacyTC   bool
	accelOn    bool
	proxyRules map[uint16]datapath.ProxyRule
	// inbound redirects: rules by (netns, port), attached netns,
	// listeners by (netns, proxy port)
	proxyIn        map[[2]uint64]datapath.ProxyInRule
	proxyInNetns   map[uint64]bool
	proxyListeners map[[2]uint64]int
	peers          map[netip.Prefix]datapath.Peer
	vnis           map[uint32]uint32 // network id -> VNI
	vlans          map[uint16]datapath.VLAN
	overlay        string
	encap          datapath.OverlayEncap
}

// New returns an empty fake datapath.
func New() *Fake {
	return &Fake{
		Unavailable: datapath.NewUnavailable(errors.New("the fake datapath does not model it")),
		endpoints:   map[netip.Addr]model.EndpointEntry{},
		devices:     map[string]model.Mode{},
		ports:       map[PortKey]datapath.Port{},
		services:    map[uint32]model.Service{},
		neigh:       map[neighKey]net.HardwareAddr{},
		peers:       map[netip.Prefix]datapath.Peer{},
		vnis:        map[uint32]uint32{},
		vlans:       map[uint16]datapath.VLAN{},
	}
}

var _ datapath.Datapath = (*Fake)(nil)

// change runs apply under Fail's rules.
func (f *Fake) change(op string, arg any, apply func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail != nil {
		if err := f.Fail(op, arg); err != nil {
			if f.FailAfterWrite {
				apply()
			}
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	apply()
	return nil
}

func (f *Fake) Available() error { return nil }
func (f *Fake) XDPErr() error    { return nil }
func (f *Fake) UseLegacyTC(on bool) error {
	return f.change("use-legacy-tc", on, func() { f.legacyTC = on })
}
func (f *Fake) LegacyTC() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.legacyTC }
func (f *Fake) Close() error   { return nil }

func (f *Fake) Attach(ifname string, _ int, mode model.Mode) error {
	return f.change("attach", ifname, func() { f.devices[ifname] = mode })
}

func (f *Fake) AttachNetkit(ifname string, _ int) error {
	return f.change("attach-netkit", ifname, func() { f.devices[ifname] = "netkit" })
}

func (f *Fake) Detach(ifname string, _ int) error {
	return f.change("detach", ifname, func() { delete(f.devices, ifname) })
}

func (f *Fake) Hooks(ifname string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.devices[ifname]; ok {
		return []string{string(m)}
	}
	return nil
}

func (f *Fake) AttachVMPort(ifname string, _ int) (string, error) {
	return "/fake/" + ifname + "_xsks", f.change("attach-vm-port", ifname, func() { f.devices[ifname] = "vmport" })
}

func (f *Fake) DetachVMPort(ifname string) error {
	return f.change("detach-vm-port", ifname, func() { delete(f.devices, ifname) })
}

func (f *Fake) VMPorts() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for d, m := range f.devices {
		if m == "vmport" {
			out = append(out, d)
		}
	}
	return out, nil
}

func (f *Fake) AttachedDevices() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, d := range slices.Sorted(maps.Keys(f.devices)) {
		if f.devices[d] != "vmport" {
			out = append(out, d)
		}
	}
	return out, nil
}

func (f *Fake) PutEndpoint(addr netip.Addr, v model.EndpointEntry) error {
	return f.change("put-endpoint", addr, func() { f.endpoints[addr] = v })
}

func (f *Fake) Endpoint(addr netip.Addr) (model.EndpointEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.endpoints[addr]
	if !ok {
		return v, fmt.Errorf("endpoint %s: %w", addr, model.ErrNotFound)
	}
	return v, nil
}

func (f *Fake) DeleteEndpoint(addr netip.Addr) error {
	return f.change("delete-endpoint", addr, func() { delete(f.endpoints, addr) })
}

func (f *Fake) EndpointAddrs() ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.SortedFunc(maps.Keys(f.endpoints), netip.Addr.Compare), nil
}

func (f *Fake) Counters(int) (map[datapath.CounterKey]model.Counter, error) {
	return map[datapath.CounterKey]model.Counter{}, nil
}
func (f *Fake) DumpMap(name string, _ int) (*datapath.MapDump, error) {
	return nil, datapath.ErrNoSuchMap
}

func (f *Fake) PutNeigh(addr netip.Addr, ifindex int, mac net.HardwareAddr) error {
	return f.change("put-neigh", addr, func() { f.neigh[neighKey{addr, ifindex}] = mac })
}

func (f *Fake) DeleteNeigh(addr netip.Addr, ifindex int) error {
	return f.change("delete-neigh", addr, func() { delete(f.neigh, neighKey{addr, ifindex}) })
}

func (f *Fake) Neigh(addr netip.Addr, ifindex int) (net.HardwareAddr, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mac, ok := f.neigh[neighKey{addr, ifindex}]
	return mac, ok, nil
}

func (f *Fake) FlushNeigh() error {
	return f.change("flush-neigh", nil, func() { clear(f.neigh) })
}

func (f *Fake) AttachUplink(ifname string, _ int, _ uint32, _ bool, mode string) (string, error) {
	if mode == "" || mode == datapath.XDPModeAuto {
		mode = datapath.XDPModeNative
	}
	return mode, f.change("attach-uplink", ifname, func() {})
}

func (f *Fake) EnsureUplinkXDP() error { return f.change("ensure-uplink-xdp", nil, func() {}) }

func (f *Fake) AttachUplinkTC(ifname string, _ int) error {
	return f.change("attach-uplink-tc", ifname, func() {})
}

func (f *Fake) SetConfig(c datapath.NodeConfig) error {
	return f.change("set-config", c, func() { f.config = c })
}

func (f *Fake) AttachSockLB(path string) error { return f.change("attach-socklb", path, func() {}) }

func portKey(p datapath.Port) PortKey {
	return PortKey{HostIP: p.HostIP, Proto: p.Proto, NodePort: p.NodePort, V4: p.Addr.Is4()}
}

func (f *Fake) PutPort(p datapath.Port) error {
	return f.change("put-port", p, func() { f.ports[portKey(p)] = p })
}

func (f *Fake) DeletePort(p datapath.Port) error {
	return f.change("delete-port", p, func() { delete(f.ports, portKey(p)) })
}

// PublishedPorts lists the published ports, sorted.
func (f *Fake) PublishedPorts() ([]datapath.Port, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return SortPorts(slices.Collect(maps.Values(f.ports))), nil
}

// SortPorts sorts ps by node port, protocol and address, for comparisons.
func SortPorts(ps []datapath.Port) []datapath.Port {
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.NodePort != b.NodePort {
			return a.NodePort < b.NodePort
		}
		if a.Proto != b.Proto {
			return a.Proto < b.Proto
		}
		if a.HostIP != b.HostIP {
			return a.HostIP.Less(b.HostIP)
		}
		return a.Addr.Less(b.Addr)
	})
	return ps
}

func (f *Fake) Flows(int) ([]model.Flow, error)            { return nil, nil }
func (f *Fake) FlushCT() (int, error)                      { return 0, nil }
func (f *Fake) CTStats() (datapath.CTStats, error)         { return datapath.CTStats{}, nil }
func (f *Fake) GCCT(uint64, func(model.Flow)) (int, error) { return 0, nil }

// Programmed is what the datapath keeps of a service: its ID, VIP,
// protocol, affinity with the timeout it applies, and backends (not its
// name or creation time).
func Programmed(s model.Service) model.Service {
	return model.Service{ID: s.ID, VIP: s.VIP, Proto: s.Proto, Affinity: s.Affinity,
		AffinityTimeout: s.EffectiveAffinityTimeout(), Backends: slices.Clone(s.Backends)}
}

func (f *Fake) PutService(s model.Service) error {
	s = Programmed(s)
	return f.change("put-service", s, func() { f.services[s.ID] = s })
}

func (f *Fake) DeleteService(s model.Service) error {
	return f.change("delete-service", s, func() { delete(f.services, s.ID) })
}

// PutServices puts one after the other, as far as Fail lets it.
func (f *Fake) PutServices(svcs []model.Service) error {
	for _, s := range svcs {
		if err := f.PutService(s); err != nil {
			return err
		}
	}
	return nil
}

// ServicesMemory: the fake's services cost nothing.
func (f *Fake) ServicesMemory() (datapath.ServicesMemory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return datapath.ServicesMemory{Services: len(f.services)}, nil
}

func (f *Fake) DeleteServices(svcs []model.Service) error {
	var errs []error
	for _, s := range svcs {
		errs = append(errs, f.DeleteService(s))
	}
	return errors.Join(errs...)
}

func (f *Fake) ServiceIDs() (map[uint32]model.Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.services), nil
}

// The socket layer: the fake records settings and rules; no counters.

func (f *Fake) EnableAccel(s datapath.AccelSettings) error {
	return f.change("enable-accel", s, func() { f.accelOn = true })
}
func (f *Fake) DisableAccel() error {
	return f.change("disable-accel", nil, func() { f.accelOn = false })
}
func (f *Fake) AccelStatus() (datapath.AccelStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return datapath.AccelStatus{Attached: f.accelOn, On: f.accelOn}, nil
}
func (f *Fake) AttachProxy(path string) error { return f.change("attach-proxy", path, func() {}) }
func (f *Fake) DetachProxy(id uint64) error   { return f.change("detach-proxy", id, func() {}) }
func (f *Fake) PutProxyRule(r datapath.ProxyRule) error {
	return f.change("put-proxy-rule", r, func() {
		if f.proxyRules == nil {
			f.proxyRules = map[uint16]datapath.ProxyRule{}
		}
		f.proxyRules[r.Port] = r
	})
}
func (f *Fake) DeleteProxyRule(port uint16) error {
	return f.change("delete-proxy-rule", port, func() { delete(f.proxyRules, port) })
}
func (f *Fake) ProxyRules() (map[uint16]datapath.ProxyRule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.proxyRules), nil
}
func (f *Fake) ProxyStats() (map[string]uint64, error) { return map[string]uint64{}, nil }
func (f *Fake) AttachProxyIn(path string, netns uint64) error {
	return f.change("attach-proxy-in", netns, func() {
		if f.proxyInNetns == nil {
			f.proxyInNetns = map[uint64]bool{}
		}
		f.proxyInNetns[netns] = true
	})
}
func (f *Fake) DetachProxyIn(netns uint64) error {
	return f.change("detach-proxy-in", netns, func() { delete(f.proxyInNetns, netns) })
}
func (f *Fake) ProxyInNetns() ([]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Keys(f.proxyInNetns)), nil
}
func (f *Fake) PutProxyInRule(r datapath.ProxyInRule) error {
	return f.change("put-proxy-in-rule", r, func() {
		if f.proxyIn == nil {
			f.proxyIn = map[[2]uint64]datapath.ProxyInRule{}
		}
		f.proxyIn[[2]uint64{r.Netns, uint64(r.Port)}] = r
	})
}
func (f *Fake) DeleteProxyInRule(r datapath.ProxyInRule) error {
	return f.change("delete-proxy-in-rule", r, func() {
		delete(f.proxyIn, [2]uint64{r.Netns, uint64(r.Port)})
		delete(f.proxyListeners, [2]uint64{r.Netns, uint64(r.ToPort)})
	})
}
func (f *Fake) ProxyInRules() ([]datapath.ProxyInRule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.proxyIn)), nil
}
func (f *Fake) ProxyListener(netns uint64, port uint16, family uint8) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.proxyListeners[[2]uint64{netns, uint64(port)}] > 0
}
func (f *Fake) PutProxyListener(netns uint64, port uint16, family uint8, fd int) error {
	return f.change("put-proxy-listener", port, func() {
		if f.proxyListeners == nil {
			f.proxyListeners = map[[2]uint64]int{}
		}
		f.proxyListeners[[2]uint64{netns, uint64(port)}]++
	})
}

func (f *Fake) PutPeer(p datapath.Peer) error {
	return f.change("put-peer", p, func() { f.peers[p.Prefix] = p })
}

func (f *Fake) DeletePeer(p netip.Prefix) error {
	return f.change("delete-peer", p, func() { delete(f.peers, p) })
}

func (f *Fake) Peers() ([]datapath.Peer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.peers)), nil
}

func (f *Fake) SetNetworkVNI(networkID, vni uint32) error {
	return f.change("set-vni", networkID, func() { f.vnis[networkID] = vni })
}

func (f *Fake) DeleteNetworkVNI(networkID, _ uint32) error {
	return f.change("delete-vni", networkID, func() { delete(f.vnis, networkID) })
}

func (f *Fake) AttachOverlay(ifname string, _ int) error {
	return f.change("attach-overlay", ifname, func() { f.overlay = ifname })
}

func (f *Fake) SetOverlayEncap(e datapath.OverlayEncap) error {
	return f.change("set-overlay-encap", e.BPF, func() { f.encap = e })
}

// OverlayEncap is what SetOverlayEncap last wrote.
func (f *Fake) OverlayEncap() datapath.OverlayEncap {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.encap
}

func (f *Fake) DetachOverlay(ifname string) error {
	return f.change("detach-overlay", ifname, func() { f.overlay = "" })
}

func (f *Fake) PutVLAN(v datapath.VLAN, _ string) error {
	return f.change("put-vlan", v.ID, func() { f.vlans[v.ID] = v })
}

func (f *Fake) DeleteVLAN(id uint16, _ string) error {
	return f.change("delete-vlan", id, func() { delete(f.vlans, id) })
}

func (f *Fake) VLANs() ([]datapath.VLAN, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.vlans)), nil
}

// FailOp is a Fail hook that fails operation op (ErrFake) where when says
// so of its argument.
func FailOp(op string, when func(arg any) bool) func(string, any) error {
	return func(o string, arg any) error {
		if o == op && when(arg) {
			return ErrFake
		}
		return nil
	}
}
