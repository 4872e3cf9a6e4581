package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Shared types, generated from bpf/lib/abi.h.
type (
	EndpointKey = tcEndpointKey
	EndpointVal = tcEndpointVal
	MetricsKey  = tcMetricsKey
	MetricsVal  = tcMetricsVal
	// MetricsDevVal is a slot of xlane_metrics_uplink.
	MetricsDevVal = tcMetricsDevVal
	Reason        = tcXlReason
	Dir           = tcXlDir
	Hook          = tcXlHook
)

const (
	DirEgress  = tcXlDirXL_DIR_EGRESS
	DirIngress = tcXlDirXL_DIR_INGRESS
	// The attach point of the program that decided a counted packet
	// (MetricsKey.Hook).
	HookTC     = tcXlHookXL_HOOK_TC
	HookXDP    = tcXlHookXL_HOOK_XDP
	HookNetkit = tcXlHookXL_HOOK_NETKIT
	// HookSock: a socket hook of the node's processes (sock_lb.c), no
	// packet (a refused connect or sendmsg).
	HookSock  = tcXlHookXL_HOOK_SOCK
	ReasonMax = tcXlReasonXL_REASON_MAX
)

// Shared XDP and conntrack types, generated from bpf/lib/abi.h.
type (
	NeighKey   = xdpNeighKey
	NeighVal   = xdpNeighVal
	CTKey      = tcCtKey
	CTVal      = tcCtVal
	Config     = tcXlConfig
	PublishKey = tcPublishKey
	PublishVal = tcPublishVal
	CTState    = tcCtState
	ServiceKey = tcServiceKey
	ServiceVal = tcServiceVal
	BackendKey = tcBackendKey
	BackendVal = tcBackendVal
	// AffinityKey and AffinityVal are xlane_affinity's (ClientIP).
	AffinityKey = tcAffinityKey
	AffinityVal = tcAffinityVal
	CTNat       = tcCtNat
	PeerKey     = tcPeerKey
	PeerVal     = tcPeerVal
	OverlayCfg  = tcOverlayCfg
	VlanVal     = tcVlanVal
)

// OverlayEncapBPF is overlay_cfg's flag for encapsulation in BPF (enum
// xl_overlay_flags, bpf/lib/overlay_encap.h).
const OverlayEncapBPF = tcXlOverlayFlagsXL_OVERLAY_ENCAP_BPF

// OverlayEncryptedRx is overlay_cfg's flag for --encryption-strict on the
// way in (bpf/tc_overlay.c overlay_unencrypted).
const OverlayEncryptedRx = tcXlOverlayFlagsXL_OVERLAY_ENCRYPTED_RX

// Peer flags (enum xl_peer_flags, bpf/lib/overlay.h).
const (
	PeerFlagV6     = uint16(tcXlPeerFlagsXL_PEER_V6)
	PeerFlagNative = uint16(tcXlPeerFlagsXL_PEER_NATIVE)
	PeerFlagSelf   = uint16(tcXlPeerFlagsXL_PEER_SELF)
	PeerFlagGone   = uint16(tcXlPeerFlagsXL_PEER_GONE)
	PeerFlagDown   = uint16(tcXlPeerFlagsXL_PEER_DOWN)
	// PeerFlagUnencrypted: --encryption-strict, no working WireGuard
	// session with the node: drop_unencrypted.
	PeerFlagUnencrypted = uint16(tcXlPeerFlagsXL_PEER_UNENCRYPTED)
)

// Conntrack constants from abi.h.
const (
	CTDirReply             = tcCtDirCT_DIR_REPLY
	CTDirOrig              = tcCtDirCT_DIR_ORIG
	CTNatNone              = tcCtNatCT_NAT_NONE
	CTNatSrc               = tcCtNatCT_NAT_SRC
	CTNatDst               = tcCtNatCT_NAT_DST
	ConfigNoBackendReject  = uint32(tcXlConfigFlagsXL_CFG_NO_BACKEND_REJECT)
	CTNatBoth              = tcCtNatCT_NAT_BOTH
	CTNew                  = tcCtStateCT_NEW
	CTEstablished          = tcCtStateCT_ESTABLISHED
	CTClosing              = tcCtStateCT_CLOSING
	CTClosed               = tcCtStateCT_CLOSED
	EPFlagMasquerade       = uint16(tcXlEpFlagsXL_EP_MASQUERADE)
	EPFlagXDPTarget        = uint16(tcXlEpFlagsXL_EP_XDP_TARGET)
	EPFlagNoICC            = uint16(tcXlEpFlagsXL_EP_NO_ICC)
	EPFlagIsolated         = uint16(tcXlEpFlagsXL_EP_ISOLATED)
	EPFlagAllowUnsolicited = uint16(tcXlEpFlagsXL_EP_ALLOW_UNSOLICITED)
	EPFlagNoPeer           = uint16(tcXlEpFlagsXL_EP_NO_PEER)
	EPFlagVLAN             = uint16(tcXlEpFlagsXL_EP_VLAN)
	SvcAffinity            = uint32(tcServiceFlagsSVC_AFFINITY)
	BackendDraining        = uint16(tcBackendFlagsBACKEND_DRAINING)
)

// DefaultCTSize is xlane_ct's size unless the daemon is told otherwise.
const DefaultCTSize = 1 << 20

// Objects are the loaded datapath programs and the maps they share.
type Objects struct {
	tcObjects
	xdp          xdpExtra
	fromUplink   *ebpf.Program // XDP on the uplink (uplink collection)
	genUplink    *ebpf.Program // the same in generic mode (no frags)
	tcFromUplink *ebpf.Program // tcx ingress on the uplink (tcuplink collection)
	fromOverlay  *ebpf.Program // tcx ingress on the VXLAN device (tcoverlay collection)
	toOverlay    *ebpf.Program // tcx egress on the VXLAN device (tcoverlay collection)
	toVLAN       *ebpf.Program // tcx ingress on a VLAN's port (tcvlan collection)
	xdpErr       error         // why the XDP programs did not load (compat.go)
	sock         socklbPrograms
	replaced     []string // pins Load replaced (replaceIncompatiblePins)
	opt          Options  // what Load was asked for (LoadNetkit's constants)
	// maps are every map loaded so far by ELF name, the tc collection's
	// first: later collections share them (shareWith). own are the ones
	// not in tcObjects, closed by Close.
	maps map[string]*ebpf.Map
	own  []*ebpf.Map
}

// ReplacedPins lists the pinned maps Load replaced because an older
// xlaned left them with another layout; the daemon logs them.
func (o *Objects) ReplacedPins() []string { return o.replaced }

// xdpExtra is what the xdp collection adds to the tc one.
type xdpExtra struct {
	FromEndpoint        *ebpf.Program `ebpf:"xlane_xdp_from_endpoint"`
	GenericFromEndpoint *ebpf.Program `ebpf:"xlane_xdp_generic_from_endpoint"`
	Scratch             *ebpf.Map     `ebpf:"xlane_l4csum_scratch"`
}

// Close releases the objects (pins stay).
func (o *Objects) Close() error {
	o.xdp.FromEndpoint.Close()
	o.xdp.GenericFromEndpoint.Close()
	o.fromUplink.Close()
	o.genUplink.Close()
	o.tcFromUplink.Close()
	o.fromOverlay.Close()
	o.toOverlay.Close()
	o.toVLAN.Close()
	o.sock.Close()
	o.xdp.Scratch.Close()
	for _, m := range o.own {
		m.Close()
	}
	return o.tcObjects.Close()
}

// ErrPinDir is returned when the pin directory is not on a bpffs.
var ErrPinDir = errors.New("pin directory is not on a BPF filesystem")

// Spec returns the embedded collection spec of the tc programs.
func Spec() (*ebpf.CollectionSpec, error) { return loadTc() }

// Options tune what Load creates.
type Options struct {
	// CTSize is xlane_ct's max_entries (0: DefaultCTSize). A pinned table
	// of another size is refused: resizing drops every tracked flow.
	CTSize uint32
	// MaglevSize is the slots of every service's Maglev table, a prime
	// (0: each service's table sized for its backends by the datapath;
	// the template then has DefaultMaglevSize).
	MaglevSize uint32
	// Cluster says the node is part of a cluster (xlaned --cluster-cidr):
	// the programs consult xlane_peers. Without it they never do, and
	// skip its trie lookup (xl_cluster, bpf/lib/overlay.h).
	Cluster bool
	// NoMonitor loads the programs with the monitor's hooks built out
	// (xl_monitor, bpf/lib/monitor.h; xlaned --monitor=false): no event
	// is ever emitted, whatever xlane_mon_config says, and a packet pays
	// nothing for the monitor. A Tracer's own programs keep theirs.
	NoMonitor bool
}

// setConstants gives spec the load-time constants o asks for (the
// volatile const globals of bpf/lib; a collection without one ignores it).
func setConstants(spec *ebpf.CollectionSpec, o Options) error {
	if v, ok := spec.Variables["xl_cluster"]; ok && o.Cluster {
		if err := v.Set(uint8(1)); err != nil {
			return fmt.Errorf("set xl_cluster: %w", err)
		}
	}
	if v, ok := spec.Variables["xl_monitor"]; ok && o.NoMonitor {
		if err := v.Set(uint8(0)); err != nil {
			return fmt.Errorf("set xl_monitor: %w", err)
		}
	}
	return nil
}

// MonitorBuiltIn says whether the loaded programs have the monitor's
// hooks (Options.NoMonitor not set).
func (o *Objects) MonitorBuiltIn() bool { return !o.opt.NoMonitor }

// DefaultMaglevSize is the inner map template's size (BPF_F_INNER_MAP:
// the tables themselves may differ) and the table size of the BPF tests.
const DefaultMaglevSize = 1021

// adaptSpec adjusts a collection spec Load read (name: tc, xdp, uplink,
// tcuplink, tcoverlay, tcvlan, socklb) before it loads. It does nothing in the product; tests
// comparing against an older build's objects (LoadFrom) give those the
// maps and programs added since, which this build's loader assigns.
var adaptSpec = func(name string, spec *ebpf.CollectionSpec) {}

// loadSpec reads a collection spec with load, adapts it (adaptSpec) and
// sets the constants of o.
func loadSpec(name string, load func() (*ebpf.CollectionSpec, error), o Options) (*ebpf.CollectionSpec, error) {
	spec, err := load()
	if err != nil {
		return nil, err
	}
	adaptSpec(name, spec)
	return spec, setConstants(spec, o)
}

// Load loads the programs. Maps are pinned in pinDir (created if needed),
// reusing maps already pinned there. An empty pinDir loads unpinned maps,
// for tests.
func Load(pinDir string, o ...Options) (*Objects, error) {
	var opt Options
	if len(o) > 0 {
		opt = o[0]
	}
	spec, err := loadSpec("tc", loadTc, opt)
	if err != nil {
		return nil, err
	}
	if len(o) > 0 && o[0].CTSize != 0 {
		spec.Maps["xlane_ct"].MaxEntries = o[0].CTSize
	}
	msize := uint32(DefaultMaglevSize)
	if len(o) > 0 && o[0].MaglevSize != 0 {
		msize = o[0].MaglevSize
	}
	spec.Maps["xlane_maglev"].InnerMap.MaxEntries = msize
	opts := &ebpf.CollectionOptions{}
	var replaced []string
	if pinDir != "" {
		if err := os.MkdirAll(pinDir, 0o700); err != nil {
			return nil, fmt.Errorf("create pin dir: %w", err)
		}
		opts.Maps.PinPath = pinDir
		if replaced, err = replaceIncompatiblePins(spec, pinDir); err != nil {
			return nil, err
		}
	} else {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	objs := Objects{replaced: replaced, opt: opt}
	// One kernel BTF decoding for every collection (CO-RE relocations).
	opts.Cache = btf.NewCache()
	// The tc collection declares every map of the node (bpf/lib/maps.h):
	// they are created (and pinned) first, alone, so that every program,
	// the tc ones included, can then be verified concurrently on the same
	// maps. Verification is most of a start (seconds on a loaded 2-CPU
	// machine); the kernel runs privileged verifications in parallel.
	if err := spec.LoadAndAssign(&objs.tcMaps, opts); err != nil {
		return nil, fmt.Errorf("load tc maps: %w", err)
	}
	objs.maps = objs.mapsByName()
	tcOpts := &ebpf.CollectionOptions{MapReplacements: objs.mapsByName(), Cache: opts.Cache}
	specs := map[string]*ebpf.CollectionSpec{"tc": spec}
	for _, c := range []struct {
		name string
		load func() (*ebpf.CollectionSpec, error)
	}{{"xdp", loadXdp}, {"uplink", loadUplink}, {"tcuplink", loadTcuplink}, {"tcoverlay", loadTcoverlay},
		{"tcvlan", loadTcvlan}, {"socklb", loadSocklb}} {
		s, err := loadSpec(c.name, c.load, opt)
		if err != nil {
			objs.tcMaps.Close()
			return nil, fmt.Errorf("load %s programs: %w", c.name, err)
		}
		specs[c.name] = s
	}
	// A map two later collections declare that tc does not is created
	// before them too, from the first declaring spec (xdp's scratch).
	for _, name := range []string{"xdp", "uplink", "tcuplink", "tcoverlay", "tcvlan", "socklb"} {
		for mname, ms := range specs[name].Maps {
			if _, ok := objs.maps[mname]; ok || isDataSection(mname) || !declaredByTwo(specs, mname) {
				continue
			}
			m, err := ebpf.NewMap(ms)
			if err != nil {
				objs.Close()
				return nil, fmt.Errorf("create map %s: %w", mname, err)
			}
			objs.maps[mname], objs.own = m, append(objs.own, m)
		}
	}
	var tcProgs struct {
		tcPrograms
		tcVariables
	}
	var up struct {
		Prog    *ebpf.Program `ebpf:"xlane_xdp_from_uplink"`
		Generic *ebpf.Program `ebpf:"xlane_xdp_generic_from_uplink"`
	}
	var tu struct {
		Prog *ebpf.Program `ebpf:"xlane_from_uplink"`
	}
	var tov struct {
		FromOverlay *ebpf.Program `ebpf:"xlane_from_overlay"`
		ToOverlay   *ebpf.Program `ebpf:"xlane_to_overlay"`
	}
	var tvl struct {
		ToVLAN *ebpf.Program `ebpf:"xlane_to_vlan"`
	}
	// Each collection loads on the maps above (shareWith); the maps a
	// collection alone declares are its own, kept in objs.own.
	loads := []struct {
		name string
		opts *ebpf.CollectionOptions
		to   any
		own  map[string]*ebpf.Map
		err  error
	}{
		{name: "xdp", to: &objs.xdp}, {name: "uplink", to: &up}, {name: "tcuplink", to: &tu},
		{name: "tcoverlay", to: &tov}, {name: "tcvlan", to: &tvl}, {name: "socklb", to: &objs.sock}, {name: "tc", opts: tcOpts, to: &tcProgs},
	}
	var wg sync.WaitGroup
	for i := range loads {
		l := &loads[i]
		if l.opts == nil {
			l.opts = objs.shareWith(specs[l.name])
			l.opts.Cache = opts.Cache
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.own, l.err = loadCollection(specs[l.name], l.opts, l.to)
		}()
	}
	wg.Wait()
	for _, l := range loads {
		for name, m := range l.own {
			objs.maps[name], objs.own = m, append(objs.own, m)
		}
	}
	objs.tcPrograms, objs.tcVariables = tcProgs.tcPrograms, tcProgs.tcVariables
	objs.fromUplink, objs.genUplink = up.Prog, up.Generic
	objs.tcFromUplink, objs.fromOverlay, objs.toOverlay, objs.toVLAN = tu.Prog, tov.FromOverlay, tov.ToOverlay, tvl.ToVLAN
	if err := loads[0].err; err != nil {
		// A verifier that refuses the XDP programs (6.1's did, until the
		// checksum pass's tail length was bounded for it) leaves the XDP
		// modes unavailable (XDPErr), the uplink's XDP programs with them;
		// the rest works.
		objs.xdpErr = fmt.Errorf("load xdp programs: %w", err)
		objs.fromUplink.Close()
		objs.genUplink.Close()
		objs.fromUplink, objs.genUplink = nil, nil
		loads[1].err = nil
	}
	for _, l := range loads[1:] {
		if l.err != nil {
			objs.Close()
			what := map[string]string{"uplink": "uplink program", "tcuplink": "uplink tc program",
				"tcoverlay": "overlay tc programs", "tcvlan": "VLAN port program",
				"socklb": "socket load-balancing programs", "tc": "tc programs"}[l.name]
			return nil, fmt.Errorf("load %s: %w", what, l.err)
		}
	}
	return &objs, nil
}

// declaredByTwo says whether two collections of specs declare map name.
func declaredByTwo(specs map[string]*ebpf.CollectionSpec, name string) bool {
	n := 0
	for _, s := range specs {
		if _, ok := s.Maps[name]; ok {
			n++
		}
	}
	return n > 1
}

// loadCollection loads spec with opts, assigns its programs and maps to to
// (a struct with ebpf tags) and returns, by name, the maps it created (the
// ones it alone declares, data sections aside), kept open for the
// collections loaded later (netkit, vmport, tracers: shareWith).
func loadCollection(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions, to any) (map[string]*ebpf.Map, error) {
	coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
	if err != nil {
		return nil, err
	}
	defer coll.Close() // what to does not take: the kernel objects live on in the programs
	own := map[string]*ebpf.Map{}
	for name, m := range coll.Maps {
		if _, ok := opts.MapReplacements[name]; ok || isDataSection(name) {
			continue
		}
		c, err := m.Clone()
		if err != nil {
			for _, m := range own {
				m.Close()
			}
			return nil, fmt.Errorf("keep map %s: %w", name, err)
		}
		own[name] = c
	}
	if err := coll.Assign(to); err != nil {
		for _, m := range own {
			m.Close()
		}
		return nil, err
	}
	return own, nil
}

// isDataSection: .rodata, .bss, .data hold one collection's own globals
// and constants; they are never shared.
func isDataSection(name string) bool { return strings.HasPrefix(name, ".") }

// shareWith makes spec use the maps already loaded wherever it declares a
// map of the same name. Nothing lists them: a map declared in
// bpf/lib/maps.h (or any header two programs include) is one map for every
// collection that uses it, whether pinned (node state) or not (per-CPU
// scratch).
func (o *Objects) shareWith(spec *ebpf.CollectionSpec) *ebpf.CollectionOptions {
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
	for name, ms := range spec.Maps {
		m, ok := o.maps[name]
		if !ok || isDataSection(name) {
			continue
		}
		// The size was chosen at load (--ct-size, --maglev-size): every
		// collection must expect the map as created.
		ms.MaxEntries = m.MaxEntries()
		opts.MapReplacements[name] = m
	}
	return opts
}

// replaceIncompatiblePins removes pinned maps whose type, key, value or
// size differ from this build's (an upgrade that changed abi.h) and
// returns their names: the
// daemon rebuilds their content from its store on reconcile. Conntrack
// and counters start afresh; established NAT flows through a replaced
// xlane_ct break, which is why a layout change is a release note.
func replaceIncompatiblePins(spec *ebpf.CollectionSpec, pinDir string) ([]string, error) {
	var replaced []string
	for name, ms := range spec.Maps {
		if ms.Pinning != ebpf.PinByName {
			continue
		}
		path := filepath.Join(pinDir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			continue // not pinned yet (or unreadable: the load will say)
		}
		same := m.Type() == ms.Type && m.KeySize() == ms.KeySize && m.ValueSize() == ms.ValueSize &&
			m.MaxEntries() == ms.MaxEntries
		m.Close()
		if same {
			continue
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("replace incompatible pinned map %s: %w", path, err)
		}
		replaced = append(replaced, name)
	}
	return replaced, nil
}

// XDPFromEndpoint is the native XDP program of a host-side veth.
func (o *Objects) XDPFromEndpoint() *ebpf.Program { return o.xdp.FromEndpoint }

// XDPGenericFromEndpoint is the generic XDP program of a host-side veth.
func (o *Objects) XDPGenericFromEndpoint() *ebpf.Program { return o.xdp.GenericFromEndpoint }

// XDPFromUplink is the XDP program of the node's uplink.
func (o *Objects) XDPFromUplink() *ebpf.Program { return o.fromUplink }

// XDPGenericFromUplink is the uplink's program for generic XDP.
func (o *Objects) XDPGenericFromUplink() *ebpf.Program { return o.genUplink }

// Connect4 and Connect6 are the cgroup connect hooks (sock_lb.c).
func (o *Objects) Connect4() *ebpf.Program { return o.sock.XlaneConnect4 }
func (o *Objects) Connect6() *ebpf.Program { return o.sock.XlaneConnect6 }

// Sendmsg4, Sendmsg6, Recvmsg4 and Recvmsg6 are the cgroup hooks of
// unconnected UDP (sock_lb.c): the destination translated per datagram,
// the backend's answers reported as from the address sent to.
func (o *Objects) Sendmsg4() *ebpf.Program { return o.sock.XlaneSendmsg4 }
func (o *Objects) Sendmsg6() *ebpf.Program { return o.sock.XlaneSendmsg6 }
func (o *Objects) Recvmsg4() *ebpf.Program { return o.sock.XlaneRecvmsg4 }
func (o *Objects) Recvmsg6() *ebpf.Program { return o.sock.XlaneRecvmsg6 }

// TCFromUplink is the tcx ingress program of the node's uplink.
func (o *Objects) TCFromUplink() *ebpf.Program { return o.tcFromUplink }

// FromOverlay is the tcx ingress program of the VXLAN device.
func (o *Objects) FromOverlay() *ebpf.Program { return o.fromOverlay }

// ToOverlay is the tcx egress program of the VXLAN device.
func (o *Objects) ToOverlay() *ebpf.Program { return o.toOverlay }

// Peers is xlane_peers (LPM: cluster prefix -> node).
func (o *Objects) Peers() *ebpf.Map { return o.XlanePeers }

// NetVNI is xlane_net_vni (network id -> VNI).
func (o *Objects) NetVNI() *ebpf.Map { return o.XlaneNetVni }

// VNINet is xlane_vni_net (VNI -> network id).
func (o *Objects) VNINet() *ebpf.Map { return o.XlaneVniNet }

// ToVLAN is the tcx ingress program of a VLAN's port (bpf/lib/vlan.h).
func (o *Objects) ToVLAN() *ebpf.Program { return o.toVLAN }

// VLANs is xlane_vlans (VID -> network, port, uplink).
func (o *Objects) VLANs() *ebpf.Map { return o.XlaneVlans }

// VLANDev is xlane_vlan_dev (either end of a VLAN's port -> VID).
func (o *Objects) VLANDev() *ebpf.Map { return o.XlaneVlanDev }

// Overlay is xlane_overlay (the VXLAN device).
func (o *Objects) Overlay() *ebpf.Map { return o.XlaneOverlay }

// CT is the xlane_ct map.
func (o *Objects) CT() *ebpf.Map { return o.XlaneCt }

// CTWritten tells the datapath that xlane_ct may hold entries it did not
// create itself (written from user space, or by programs of an older build
// that do not count their creations): it moves xlane_ct_seq on by 1 << 32,
// so no flow the uplink remembers as missing (bpf/lib/fw_lin.h) is trusted
// any more. Call it after the writes. A jump, not an increment: the
// datapath adds to the count meanwhile, and the value written must be one
// no CPU can have remembered.
func (o *Objects) CTWritten() error {
	if o.XlaneCtSeq == nil {
		return nil // objects of a build without the count
	}
	var zero uint32
	var n uint64
	if err := o.XlaneCtSeq.Lookup(&zero, &n); err != nil {
		return fmt.Errorf("read xlane_ct_seq: %w", err)
	}
	if err := o.XlaneCtSeq.Update(&zero, n+1<<32, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("write xlane_ct_seq: %w", err)
	}
	return nil
}

// Config is the xlane_config map.
func (o *Objects) Config() *ebpf.Map { return o.XlaneConfig }

// Publish is the xlane_publish map.
func (o *Objects) Publish() *ebpf.Map { return o.XlanePublish }

// Services is the xlane_services map.
func (o *Objects) Services() *ebpf.Map { return o.XlaneServices }

// Maglev is the xlane_maglev hash of maps.
func (o *Objects) Maglev() *ebpf.Map { return o.XlaneMaglev }

// Backends is the xlane_backends map.
func (o *Objects) Backends() *ebpf.Map { return o.XlaneBackends }

// Affinity is the xlane_affinity map (ClientIP clients and their backends).
func (o *Objects) Affinity() *ebpf.Map { return o.XlaneAffinity }

// MaglevInnerSpec is the spec of one service's slot array.
func MaglevInnerSpec(size uint32) *ebpf.MapSpec {
	return &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: size, Flags: unix.BPF_F_INNER_MAP}
}

// Devmap is the xlane_devmap map.
func (o *Objects) Devmap() *ebpf.Map { return o.XlaneDevmap }

// Neigh is the xlane_neigh map.
func (o *Objects) Neigh() *ebpf.Map { return o.XlaneNeigh }

// FromEndpoint is the tcx ingress program of a host-side veth.
func (o *Objects) FromEndpoint() *ebpf.Program { return o.XlaneFromEndpoint }

// ToEndpoint is the tcx egress program of a host-side veth.
func (o *Objects) ToEndpoint() *ebpf.Program { return o.XlaneToEndpoint }

// Endpoints is the xlane_endpoints map.
func (o *Objects) Endpoints() *ebpf.Map { return o.XlaneEndpoints }

// Metrics is the xlane_metrics map.
func (o *Objects) Metrics() *ebpf.Map { return o.XlaneMetrics }

// MetricsUplink is the xlane_metrics_uplink map: the uplink program's
// counters by reason, per CPU, for the device each slot names.
func (o *Objects) MetricsUplink() *ebpf.Map { return o.XlaneMetricsUplink }

// KeyFromAddr builds an xlane_endpoints key: IPv6 as is, IPv4 v4-mapped.
func KeyFromAddr(a netip.Addr) EndpointKey {
	return EndpointKey{Addr: a.As16()}
}

// AddrFromKey is the inverse of KeyFromAddr.
func AddrFromKey(k EndpointKey) netip.Addr {
	return netip.AddrFrom16(k.Addr).Unmap()
}

// NewEndpointVal builds an xlane_endpoints value.
func NewEndpointVal(ifindex int, networkID uint32, mac, hostMAC net.HardwareAddr, mtu int, xdpTarget bool) EndpointVal {
	v := EndpointVal{Ifindex: uint32(ifindex), NetworkId: networkID, Mtu: uint16(mtu)}
	if xdpTarget {
		v.Flags |= uint16(tcXlEpFlagsXL_EP_XDP_TARGET)
	}
	copy(v.Mac[:], mac)
	copy(v.HostMac[:], hostMAC)
	return v
}

var reasonNames = func() map[Reason]string {
	names := map[Reason]string{}
	spec, err := loadTc()
	if err != nil {
		return names
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName("xl_reason", &e); err != nil {
		return names
	}
	for _, v := range e.Values {
		names[Reason(v.Value)] = ReasonLabel(v.Name)
	}
	return names
}()

// ReasonLabel turns "XL_DROP_SPOOFED" into "drop_spoofed".
func ReasonLabel(cname string) string {
	b := []byte(cname)
	if len(b) > 3 && string(b[:3]) == "XL_" {
		b = b[3:]
	}
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// String names a reason as bpf/lib/abi.h does, lower case, without XL_.
func (r Reason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("reason_%d", uint32(r))
}

// ReasonClass is what a program does to a packet it counts under a reason.
// bpf/lib/stage.h decides the action from the reason by the same classes.
type ReasonClass int

const (
	ClassUnknown ReasonClass = iota // a name no class covers
	ClassPass                       // to Linux, unchanged
	ClassDrop                       // dropped (a reject may be answered)
	ClassForward                    // redirected by the datapath
)

// reasonClasses is the one table that classifies reasons: by their name,
// never by their position in enum xl_reason.
var reasonClasses = []struct {
	prefix string
	class  ReasonClass
}{{"fwd_", ClassForward}, {"pass_", ClassPass}, {"deliver", ClassPass}, {"drop_", ClassDrop}}

// Class says what happens to packets counted under r.
func (r Reason) Class() ReasonClass {
	n := r.String()
	for _, c := range reasonClasses {
		if strings.HasPrefix(n, c.prefix) {
			return c.class
		}
	}
	return ClassUnknown
}

// IsDrop reports whether packets counted under r were dropped.
func (r Reason) IsDrop() bool { return r.Class() == ClassDrop }

// String names a direction from the endpoint's point of view.
func (d Dir) String() string {
	if d == DirIngress {
		return "to_endpoint"
	}
	return "from_endpoint"
}

// String names an attach point as the metrics' hook label does: tc (tcx,
// or tc cls_bpf where tcx is missing), xdp, netkit, sock.
func (h Hook) String() string {
	switch h {
	case HookTC:
		return "tc"
	case HookXDP:
		return "xdp"
	case HookNetkit:
		return "netkit"
	case HookSock:
		return "sock"
	}
	return fmt.Sprintf("hook_%d", uint32(h))
}
