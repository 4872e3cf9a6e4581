package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/ipam"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/observe"
	"github.com/xlane-dev/xlane/internal/services"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/version"
	"github.com/xlane-dev/xlane/internal/vm"
)

// Version is the build's (internal/version: stamped by the Makefile,
// else the VCS information of the build).
var Version = version.Get().Version

// Config is how xlaned was started: the core's settings, and the
// features' that cmd/xlaned hands them when it makes them (Cluster, QEMU,
// AccelCaseTimeout, MonitorRate).
type Config struct {
	StatePath string
	PinDir    string
	Log       *slog.Logger
	// Uplink is the node's device towards other nodes and the world. The
	// XDP modes attach a program to it so traffic for local endpoints skips
	// the stack; "" leaves the uplink alone.
	Uplink string
	// UplinkTakeover lets xlane replace an XDP program it did not attach.
	UplinkTakeover bool
	// UplinkXDPMode is the uplink program's XDP attach mode: auto (""),
	// native, generic or offload (datapath.XDPMode*).
	UplinkXDPMode string
	// CTSize is the conntrack table's size (0: datapath.DefaultCTSize).
	CTSize uint32
	// MaglevSize is every service's Maglev table size (0: default).
	MaglevSize uint32
	// NATPorts is masquerade's source-port range, "MIN-MAX" ("" default).
	NATPorts string
	// ServiceNoBackend is what a new flow to a service VIP without
	// backends gets: services.NoBackendReject ("", the default) or
	// services.NoBackendDrop.
	ServiceNoBackend string
	// GCInterval is how often expired conntrack entries are collected.
	GCInterval time.Duration
	// AccelCaseTimeout is how long each self-test case may take (0: 5 s).
	AccelCaseTimeout time.Duration
	// MonitorRate bounds the datapath's monitor events per second per
	// CPU while a client listens (0: DefaultMonitorRate).
	MonitorRate uint32
	// NoMonitor loads the programs with the monitor's hooks built out
	// (xlaned --monitor=false): `xlane monitor` is refused, packets pay
	// nothing for it; `xlane trace` works (its programs have them).
	NoMonitor bool
	// BPFStats turns the kernel's BPF run statistics on while the daemon
	// runs (the per-program metrics; every BPF program on the machine
	// pays two clock reads per run).
	BPFStats bool
	// Cluster is the cluster's part of the flags (internal/cluster; its
	// Uplink is taken from Uplink): internal/xlaned makes the cluster with it,
	// and a node of a cluster (Cluster.NodeName) loads programs that
	// consult the peers' prefixes.
	Cluster cluster.Config
	// CalibrateAtStart measures what auto means on this node in the
	// background when no calibration is stored yet (internal/calibration).
	CalibrateAtStart bool
	// QEMU is the qemu-system-x86_64 whose netdev backends decide which
	// VM endpoint backends this node offers (internal/vm; "": vm.DefaultQEMU).
	QEMU string
	// AutoBPFOnly: every network asks for Services and NetworkPolicies,
	// which kernel mode does not carry (no BPF: no service translation, no
	// firewall), so `auto` keeps to the BPF modes whatever the calibration
	// measured (automode.go's needKube): set by xlaned --kubernetes.
	AutoBPFOnly bool
}

// Daemon is one xlane instance: a store, a datapath, a node namespace.
// It starts in three steps: Open (the store, the datapath, the core;
// nothing started), Register (the feature packages internal/xlaned made with
// Core), Start (the kernel probed, the calibration loaded, the kernel
// reconciled to the store, the features and the background work started).
type Daemon struct {
	mu    sync.Mutex // serialises every change
	cfg   Config
	log   *slog.Logger
	store *store.Store
	dp    datapath.Datapath // datapath.Unavailable where BPF cannot load
	feat  *features.Set     // probed by Open (kernel.go)
	f     Features          // the feature packages (features.go: Register)
	// statusParts are features' parts of Status (AddStatus).
	statusParts atomic.Pointer[[]func(*api.Status)]

	done      chan struct{} // closed by Close: stops background work
	closeOnce sync.Once
	node      datapath.NodeConfig
	ct        ctCounters
	runStats  io.Closer // BPF run statistics held on (Config.BPFStats)
	started   time.Time
	lastErr   observe.LastError // the last warning or error logged (core.Status)
	objErrs   objectErrors      // what the last reconcile could not apply (objerrs.go)
	// netChecks and epChecks are the features' checks of a network and
	// of an endpoint (core.NetworkValidator, core.EndpointValidator:
	// Register finds them).
	netChecks []core.NetworkValidator
	epChecks  []core.EndpointValidator

	// faults are the apply steps' fault points (core.Faults): tests make
	// one fail and check the rollback.
	faults core.Faults
}

// Open opens the store and loads the datapath (or says why it cannot, and
// takes the unavailable one: kernel mode only), probing the kernel's
// features meanwhile; nothing is started and the kernel is not touched
// beyond the datapath's pins. The caller registers the features (Register)
// and starts the daemon (Start), or closes it (Close).
func Open(cfg Config) (*Daemon, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	// Before anything is mounted or pinned (mountns.go).
	if err := checkMounts(); err != nil {
		return nil, err
	}
	if cfg.Uplink != "" {
		// A mode the uplink cannot run fails here, before anything changes.
		if err := datapath.CheckUplinkXDPMode(cfg.Uplink, cfg.UplinkXDPMode); err != nil {
			return nil, err
		}
	}
	if _, err := services.ParseNoBackend(cfg.ServiceNoBackend); err != nil {
		return nil, err
	}
	d := &Daemon{done: make(chan struct{}), started: time.Now()}
	var err error
	if d.store, err = store.Open(cfg.StatePath); err != nil {
		return nil, err
	}
	cfg.Log = slog.New(d.lastErr.Handler(cfg.Log.Handler()))
	if cfg.NATPorts == "" {
		cfg.NATPorts = DefaultNATPorts
	}
	if cfg.GCInterval == 0 {
		cfg.GCInterval = 10 * time.Second
	}
	cfg.Cluster.Uplink = cfg.Uplink
	d.cfg, d.log = cfg, cfg.Log
	// The kernel's features are probed while the datapath loads: the two
	// are independent, and the probes wait on the kernel (namespaces,
	// devices) more than they compute.
	probed := make(chan *features.Set, 1)
	go func() { probed <- features.Probe() }()
	d.dp = openDatapath(cfg, cfg.Cluster.NodeName != "", d.log)
	d.feat = <-probed
	return d, nil
}

// openDatapath loads the BPF datapath, or returns the unavailable one (and
// says why) where it cannot load. cluster: the node joins a cluster (its
// programs then consult the peers' prefixes).
func openDatapath(cfg Config, cluster bool, log *slog.Logger) datapath.Datapath {
	dp, err := datapath.Open(cfg.PinDir, datapath.Options{CTSize: cfg.CTSize, MaglevSize: cfg.MaglevSize,
		Cluster: cluster, NoMonitor: cfg.NoMonitor})
	if err != nil {
		log.Warn("BPF datapath unavailable; only kernel mode works", "err", err)
		return datapath.NewUnavailable(err)
	}
	if replaced := dp.ReplacedPins(); len(replaced) > 0 {
		log.Warn("replaced pinned maps left with an older layout; their content is rebuilt from the store (conntrack and counters start afresh)", "maps", replaced)
	}
	return dp
}

// Start brings the node to what the store says and starts the features and
// the background work, in this order: the kernel's features logged, the
// stored calibration loaded, the kernel reconciled to the store, the
// firewall and observability started (before the uplink is attached and
// the API serves), then, with the BPF datapath, the uplink, VLANs, the
// node configuration, services, the cluster, the neighbour mirror, the
// conntrack GC, run statistics, the socket layer and a calibration at
// start. On failure, or when ctx ends before it is done, the daemon is
// closed (what Open opened with it) and the error returned: nothing is
// left half-applied that the next start would not redo. Background work
// runs until Close.
func (d *Daemon) Start(ctx context.Context) error {
	err := d.start(ctx)
	if err != nil {
		d.Close()
	}
	return err
}

func (d *Daemon) start(ctx context.Context) error {
	if err := d.f.missing(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cfg, f := d.cfg, d.f
	d.probeKernel()
	if err := f.Calibration.Load(); err != nil {
		return fmt.Errorf("calibration: %w", err)
	}
	if err := d.Reconcile(); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	// The firewall is up (the stored rule set installed, endpoint changes
	// followed) before the uplink is attached and before the API serves;
	// the monitor after it (its events name the firewall's rules).
	f.Firewall.Start()
	f.Policies.Start()
	f.Observe.Start()
	if err := ctx.Err(); err != nil {
		return err
	}
	// Without the BPF datapath there is no node-wide datapath work: no
	// uplink program, node configuration, services or neighbour mirror.
	if d.dp.Available() != nil {
		return nil
	}
	if cfg.Uplink != "" {
		if err := d.attachUplink(); err != nil {
			return err
		}
	}
	if err := d.setupVLANs(); err != nil {
		d.log.Error("set up vlans", "err", err)
	}
	if err := d.setupNode(); err != nil {
		return err
	}
	if err := f.Services.Reconcile(); err != nil {
		d.log.Error("reconcile services", "err", err)
	}
	if err := f.Cluster.Start(); err != nil {
		return fmt.Errorf("join cluster: %w", err)
	}
	if err := f.Neighbours.Start(d.dp, d.log, d.done); err != nil {
		return fmt.Errorf("mirror neighbours: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	go d.gcLoop(cfg.GCInterval, d.done)
	if cfg.BPFStats {
		c, err := datapath.EnableRunStats()
		if err != nil {
			return fmt.Errorf("--bpf-stats: %w", err)
		}
		d.runStats = c
	}
	f.Sockets.Start() // proxy redirects, acceleration, xlane's cgroup
	if cfg.CalibrateAtStart && f.Calibration.Choice() == nil {
		f.Calibration.AtStart()
	}
	return nil
}

func (d *Daemon) attachUplink() error {
	l, err := netlink.LinkByName(d.cfg.Uplink)
	if err != nil {
		return fmt.Errorf("uplink %q: %w", d.cfg.Uplink, err)
	}
	if err := d.forwarding4(d.cfg.Uplink); err != nil {
		return fmt.Errorf("uplink %q: %w", d.cfg.Uplink, err)
	}
	if err := d.dp.XDPErr(); err != nil {
		// No XDP programs on this kernel (kernel.go): the uplink keeps no
		// XDP fast path; its tc program (NAT) is attached on its own.
		d.log.Warn("uplink XDP fast path unavailable on this kernel", "uplink", d.cfg.Uplink, "err", datapath.VerifierSummary(err))
		return nil
	}
	var foreign uint32
	if x := l.Attrs().Xdp; x != nil && x.Attached && !d.dp.OwnsXDP(d.cfg.Uplink) {
		foreign = x.ProgId
	}
	mode, err := d.dp.AttachUplink(d.cfg.Uplink, l.Attrs().Index, foreign, d.cfg.UplinkTakeover, d.cfg.UplinkXDPMode)
	if err != nil {
		return err
	}
	if mode == datapath.XDPModeNone && d.cfg.UplinkXDPMode != datapath.XDPModeNone {
		d.log.Info("uplink XDP program left out until the firewall's uplink stage or an xdp-mode network needs it (generic XDP here would copy every GSO packet received)", "uplink", d.cfg.Uplink)
	} else {
		d.log.Info("uplink fast path attached", "uplink", d.cfg.Uplink, "xdp_mode", mode)
	}
	// Stored xdp-mode networks: their endpoints take redirects from it.
	return d.store.View(func(tx *store.Tx) error {
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		for i := range nets {
			if err := d.xdpNetworkUplink(&nets[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// xdpNetworkUplink attaches the uplink's XDP program where auto left it
// out (datapath.AutoXDPMode) for an xdp-mode network n: traffic from off
// the node reaches its endpoints through it (xdp_uplink.c).
func (d *Daemon) xdpNetworkUplink(n *model.Network) error {
	if !n.Mode.XDP() || d.cfg.Uplink == "" || d.dp.Available() != nil {
		return nil
	}
	return d.dp.EnsureUplinkXDP()
}

// Close releases the daemon's handles. Pinned programs keep running.
func (d *Daemon) Close() error {
	var err error
	d.closeOnce.Do(func() { err = d.close() })
	return err
}

func (d *Daemon) close() error {
	close(d.done)
	d.f.close()
	if d.runStats != nil {
		d.runStats.Close()
	}
	d.dp.Close()
	return d.store.Close()
}

// ---- networks ----

func (d *Daemon) validateNetwork(tx *store.Tx, req api.NetworkCreate) (*model.Network, error) {
	if !core.NameRE.MatchString(req.Name) {
		return nil, model.Fieldf("name", "%q: must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", req.Name)
	}
	if err := d.checkNetwork(tx, core.CheckName, &req, nil); err != nil {
		return nil, err
	}
	requested, err := model.ParseMode(req.Mode)
	if err != nil {
		return nil, err
	}
	mode, why, err := d.resolveMode(requested, d.createNeeds(req))
	if err != nil {
		return nil, err
	}
	n := &model.Network{Name: req.Name, Mode: mode, ModeRequested: requested, ModeReason: why, MTU: req.MTU,
		Masquerade: natSupported(mode, true) == nil, Created: time.Now().UTC()}
	if req.Masquerade != nil {
		n.Masquerade = *req.Masquerade
	}
	if err := natSupported(n.Mode, n.Masquerade); err != nil {
		return nil, err
	}
	n.Internal = req.Internal
	n.ICCOff = req.ICC != nil && !*req.ICC
	n.Isolated = req.Isolated
	n.AllowUnsolicited = req.AllowUnsolicited
	if err := policySupported(n.Mode, n); err != nil {
		return nil, err
	}
	if err := d.resolveDevice(n, req); err != nil {
		return nil, err
	}
	if err := d.checkNetwork(tx, core.CheckDefaults, &req, n); err != nil {
		return nil, err
	}
	if len(req.Subnets) == 0 {
		return nil, model.Fieldf("subnets", "missing: give one IPv4 and/or one IPv6 subnet")
	}
	var have4, have6 bool
	for _, s := range req.Subnets {
		p, err := parseSubnet(s)
		if err != nil {
			return nil, err
		}
		if p.Addr().Is4() && have4 || p.Addr().Is6() && have6 {
			return nil, model.Fieldf("subnets", "%q: a network takes at most one IPv4 and one IPv6 subnet", s)
		}
		have4 = have4 || p.Addr().Is4()
		have6 = have6 || p.Addr().Is6()
		n.Subnets = append(n.Subnets, p)
	}
	if len(req.Gateways) > len(n.Subnets) {
		return nil, model.Fieldf("gateways", "%v: more gateways than subnets", req.Gateways)
	}
	n.Gateways = make([]netip.Addr, len(n.Subnets))
	for _, g := range req.Gateways {
		a, err := netip.ParseAddr(g)
		if err != nil {
			return nil, model.Fieldf("gateways", "%q: not an IP address", g)
		}
		placed := false
		for i, p := range n.Subnets {
			if p.Contains(a) && !n.Gateways[i].IsValid() {
				if ipam.Reserved(p, netip.Addr{}, a) {
					return nil, model.Fieldf("gateways", "%q: is the subnet or broadcast address of %s", g, p)
				}
				n.Gateways[i], placed = a, true
			}
		}
		if !placed {
			return nil, model.Fieldf("gateways", "%q: not in any subnet %v (or a second gateway for one)", g, n.Subnets)
		}
	}
	for i, p := range n.Subnets {
		if !n.Gateways[i].IsValid() {
			n.Gateways[i] = p.Masked().Addr().Next()
		}
	}
	minMTU := 576
	if have6 {
		minMTU = 1280
	}
	if err := d.validateVLAN(tx, n, req); err != nil {
		return nil, err
	}
	if err := d.checkNetwork(tx, core.CheckShape, &req, n); err != nil {
		return nil, err
	}
	if n.MTU == 0 {
		n.MTU = 1500
	}
	n.VNI = req.VNI
	if n.VNI == 0 {
		n.VNI = model.DefaultVNI(n.Name)
	}
	if n.VNI < model.MinVNI || n.VNI > model.MaxVNI {
		return nil, model.Fieldf("vni", "%d: must be between %d and %d", req.VNI, model.MinVNI, model.MaxVNI)
	}
	if n.MTU < minMTU || n.MTU > 65535 {
		return nil, model.Fieldf("mtu", "%d: must be between %d and 65535", req.MTU, minMTU)
	}
	if _, err := tx.Network(n.Name); err == nil {
		return nil, model.Conflictf("network %q already exists", n.Name)
	}
	others, err := tx.Networks()
	if err != nil {
		return nil, err
	}
	for _, o := range others {
		if cluster.NetworkVNI(&o) == n.VNI {
			return nil, model.Fieldf("vni", "%d is network %q's: give this network another with --vni", n.VNI, o.Name)
		}
		for _, op := range o.Subnets {
			for _, p := range n.Subnets {
				if op.Overlaps(p) && core.Hidden(o.Name) { // internal/calibration
					return nil, model.Conflictf("subnet %s overlaps %s, taken for a few seconds by the calibration under way (xlane calibrate --show): try again when it ends", p, op)
				}
				if op.Overlaps(p) {
					return nil, model.Conflictf("subnet %s overlaps %s of network %q", p, op, o.Name)
				}
			}
		}
	}
	// After the check against other networks, whose routes and gateways
	// are the node's too: that one names the network.
	for _, p := range n.Subnets {
		if err := netconf.CheckSubnetFree(p, d.f.Cluster.EncryptionAddrs()...); err != nil {
			return nil, err
		}
	}
	if err := d.resolveBigTCP(n, req.BigTCP); err != nil {
		return nil, err
	}
	return n, nil
}

func parseSubnet(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		msg := "not a CIDR prefix like 10.1.0.0/24 or fd00:1::/64"
		if _, _, ok := strings.Cut(s, "/"); ok {
			if _, aerr := netip.ParseAddr(strings.Split(s, "/")[0]); aerr == nil {
				msg = "invalid prefix length"
			}
		}
		return p, model.Fieldf("subnets", "%q: %s", s, msg)
	}
	if p != p.Masked() {
		return p, model.Fieldf("subnets", "%q: host bits set (did you mean %s?)", s, p.Masked())
	}
	if p.Addr().Is4() && p.Bits() > 30 || p.Addr().Is6() && p.Bits() > 126 {
		return p, model.Fieldf("subnets", "%q: too small for a gateway and an endpoint", s)
	}
	if p.Addr().Is4In6() || p.Addr().IsLoopback() || p.Addr().IsMulticast() || p.Addr().IsLinkLocalUnicast() {
		return p, model.Fieldf("subnets", "%q: not a unicast range endpoints can use", s)
	}
	return p, nil
}

// CreateNetwork validates req, creates the network's kernel objects and
// records it; on any failure nothing stays behind.
func (d *Daemon) CreateNetwork(req api.NetworkCreate) (*model.Network, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n *model.Network
	var sysctls map[string]string // taken by this create (sysctl.go)
	applied := false
	err := d.store.Update(func(tx *store.Tx) error {
		var err error
		if n, err = d.validateNetwork(tx, req); err != nil {
			return err
		}
		if err := d.xdpNetworkUplink(n); err != nil {
			return err
		}
		if n.ID, err = tx.NextNetworkID(); err != nil {
			return err
		}
		if sysctls, err = rememberSysctls(tx, n); err != nil {
			return err
		}
		n.Device = fmt.Sprintf("xlnet%d", n.ID)
		applied = true
		if err := netconf.EnsureNetwork(n); err != nil {
			return err
		}
		if err := netconf.EnsureInternal(n); err != nil {
			return err
		}
		if err := netconf.EnsureGuard(n, d.f.Cluster.CIDRs()); err != nil {
			return err
		}
		// Every mode's VNI (joinCluster): a kernel-mode pod's too.
		if d.dp.Available() == nil {
			if err := d.dp.SetNetworkVNI(n.ID, n.VNI); err != nil {
				return err
			}
		}
		if err := d.applyVLAN(n); err != nil {
			return err
		}
		if err := d.faults.At("network-applied"); err != nil {
			return err
		}
		return tx.PutNetwork(n)
	})
	if err != nil {
		if applied {
			if uerr := errors.Join(d.removeVLAN(n), d.dp.DeleteNetworkVNI(n.ID, n.VNI), netconf.DeleteGuard(n), netconf.DeleteInternal(n), netconf.DeleteNetwork(n), netconf.RestoreSysctls(sysctls)); uerr != nil {
				d.log.Error("roll back network", "network", n.Name, "err", uerr)
			}
		}
		return nil, err
	}
	d.log.Info("network created", "network", n.Name, "mode", n.Mode, "subnets", n.Subnets)
	return n, nil
}

// networkWithEndpoints reads network name and its endpoints from the
// store (model.ErrNotFound: no such network).
func (d *Daemon) networkWithEndpoints(name string) (n *model.Network, eps []model.Endpoint, err error) {
	err = d.store.View(func(tx *store.Tx) error {
		var err error
		if n, err = tx.Network(name); err != nil {
			return err
		}
		all, err := tx.Endpoints()
		for _, e := range all {
			if e.Network == name {
				eps = append(eps, e)
			}
		}
		return err
	})
	return n, eps, err
}

// DeleteNetwork removes a network. A missing network is not an error. With
// endpoints it fails unless force, which removes them first. A
// calibration's networks are not the user's to delete (internal/calibration).
func (d *Daemon) DeleteNetwork(name string, force bool) error {
	if core.Hidden(name) {
		return nil
	}
	return d.deleteNetwork(name, force)
}

func (d *Daemon) deleteNetwork(name string, force bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, eps, err := d.networkWithEndpoints(name)
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(eps) > 0 && !force {
		return model.Conflictf("network %q has %d endpoints (remove them, or delete with --force)", name, len(eps))
	}
	for i := range eps {
		if err := d.removeEndpoint(&eps[i], n); err != nil {
			return err
		}
	}
	if err := d.removeVLAN(n); err != nil {
		return err
	}
	if err := netconf.DeleteInternal(n); err != nil {
		return err
	}
	if err := netconf.DeleteGuard(n); err != nil {
		return err
	}
	if err := netconf.DeleteNetwork(n); err != nil {
		return err
	}
	if err := d.dp.DeleteNetworkVNI(n.ID, cluster.NetworkVNI(n)); err != nil {
		return err
	}
	if err := d.store.Update(func(tx *store.Tx) error { return tx.DeleteNetwork(name) }); err != nil {
		return err
	}
	d.objErrs.set(objNetwork, name, nil)
	d.log.Info("network deleted", "network", name)
	return nil
}

// Networks lists the networks with their endpoint counts.
func (d *Daemon) Networks() ([]api.NetworkInfo, error) {
	var out []api.NetworkInfo
	err := d.store.View(func(tx *store.Tx) error {
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		for _, n := range nets {
			if core.Hidden(n.Name) { // the calibration's (internal/calibration)
				continue
			}
			info := api.NetworkInfo{Network: n}
			for _, e := range eps {
				if e.Network == n.Name {
					info.Endpoints++
				}
			}
			out = append(out, info)
		}
		return nil
	})
	return out, err
}

// Network returns one network.
func (d *Daemon) Network(name string) (*api.NetworkInfo, error) {
	nets, err := d.Networks()
	if err != nil {
		return nil, err
	}
	for i := range nets {
		if nets[i].Name == name {
			return &nets[i], nil
		}
	}
	return nil, model.NotFoundf("network %q", name)
}

// AutoMode is the mode `auto` resolves to where the BPF datapath works
// (core.AutoMode), and why: the figures behind it are in docs/benchmarks.md.
const (
	AutoMode   = core.AutoMode
	autoReason = "tc: fastest and correct for container traffic on this kernel in the same-run benchmark " +
		"(TCP 1.09-1.26x kernel routing, lowest latency; native XDP loses TCP: TSO off on the peer and a checksum pass; docs/benchmarks.md)"
)

// resolveMode turns a requested mode into the one to run: auto picks, for
// a network asking for needs, what the calibration ranks first among the
// modes that give it all of them (automode.go), AutoMode before a
// calibration, or kernel where BPF cannot load; an explicit BPF mode on a
// node without the BPF datapath is refused.
func (d *Daemon) resolveMode(m model.Mode, needs []need) (model.Mode, string, error) {
	dpErr := d.dp.Available()
	switch {
	case m == model.ModeAuto && dpErr != nil:
		return model.ModeKernel, "kernel: " + dpErr.Error(), nil
	case m == model.ModeAuto && d.modeMissing(AutoMode) != nil:
		return model.ModeKernel, "kernel: " + string(AutoMode) + " cannot run here (" + d.modeMissing(AutoMode).Error() + ")", nil
	case m == model.ModeAuto:
		mode, why := d.autoFrom(d.f.Calibration.Choice(), needs)
		return mode, why, nil
	case m.BPF() && dpErr != nil:
		return "", "", fmt.Errorf("mode %s: %w", m, dpErr)
	case m.BPF() && d.modeMissing(m) != nil:
		return "", "", fmt.Errorf("mode %s: %v: %w", m, d.modeMissing(m), model.ErrUnavailable)
	}
	return m, "", nil
}

// UpdateNetwork changes a network's mode on the fly: every endpoint gets the
// new mode's programs before the old ones go (see datapath.Attach), so
// established connections carry on. If an endpoint fails, the ones already
// switched are switched back and the network keeps its mode.
func (d *Daemon) UpdateNetwork(name string, req api.NetworkUpdate) (*model.Network, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, eps, err := d.networkWithEndpoints(name)
	if err != nil {
		return nil, err
	}
	if req.Mode == "" {
		return n, nil
	}
	requested, err := model.ParseMode(req.Mode)
	if err != nil {
		return nil, err
	}
	mode, why, err := d.resolveMode(requested, d.networkNeeds(n, eps))
	if err != nil {
		return nil, err
	}
	if err := d.deviceAllowsMode(n, mode); err != nil {
		return nil, err
	}
	if err := natSupported(mode, n.Masquerade); err != nil {
		return nil, err
	}
	if err := policySupported(mode, n); err != nil {
		return nil, err
	}
	for _, e := range eps {
		if e.VM {
			if err := vm.Mode(&e, mode); err != nil {
				return nil, fmt.Errorf("endpoint %s is a VM's: %w", e.ID, err)
			}
		}
		if len(e.Ports) > 0 {
			if err := natSupported(mode, true); err != nil {
				return nil, fmt.Errorf("endpoint %s publishes ports: %w", e.ID, err)
			}
		}
	}
	old := *n
	n.Mode, n.ModeRequested, n.ModeReason = mode, requested, why
	// Kernel mode's nftables guard (netconf/guard.go) is in place before
	// the programs that did its job go, and goes after they are back.
	if mode == model.ModeKernel {
		if err := netconf.EnsureGuard(n, d.f.Cluster.CIDRs()); err != nil {
			return nil, err
		}
	}
	for i := range eps {
		err := d.reprogram(&eps[i], n)
		if err == nil {
			continue
		}
		for j := 0; j <= i; j++ {
			if rerr := d.reprogram(&eps[j], &old); rerr != nil {
				d.log.Error("switch endpoint back", "endpoint", eps[j].ID, "mode", old.Mode, "err", rerr)
			}
		}
		if gerr := netconf.EnsureGuard(&old, d.f.Cluster.CIDRs()); gerr != nil {
			d.log.Error("restore the unsolicited-traffic guard", "network", name, "err", gerr)
		}
		return nil, fmt.Errorf("switch endpoint %s to %s: %w", eps[i].ID, mode, err)
	}
	if err := netconf.EnsureGuard(n, d.f.Cluster.CIDRs()); err != nil {
		return nil, err
	}
	if err := d.store.Update(func(tx *store.Tx) error { return tx.PutNetwork(n) }); err != nil {
		return nil, err
	}
	d.log.Info("network mode changed", "network", name, "from", old.Mode, "to", mode)
	return n, nil
}

func (d *Daemon) reprogram(e *model.Endpoint, n *model.Network) error {
	host, err := netconf.HostLink(e)
	if err != nil {
		return err
	}
	return d.programEndpoint(e, n, host)
}

// ---- endpoints ----

// hostIfNames derives the veth names from the endpoint ID: stable, so a
// restarted daemon finds the same devices, and short enough for IFNAMSIZ.
func hostIfNames(id string) (host, peer string) {
	sum := sha256.Sum256([]byte(id))
	h := hex.EncodeToString(sum[:])[:10]
	return "xlh" + h, "xlc" + h
}

func (d *Daemon) validateEndpoint(tx *store.Tx, req api.EndpointAdd) (*model.Endpoint, *model.Network, error) {
	n, err := tx.Network(req.Network)
	if errors.Is(err, model.ErrNotFound) {
		return nil, nil, model.Fieldf("network", "%q: no such network", req.Network)
	}
	if err != nil {
		return nil, nil, err
	}
	e := &model.Endpoint{ID: req.ID, Network: n.Name, IfName: req.IfName, Created: time.Now().UTC()}
	if e.ID == "" {
		e.ID = core.RandomID()
	}
	if !core.IDRE.MatchString(e.ID) {
		return nil, nil, model.Fieldf("id", "%q: must be 1-128 letters, digits, '_', '.', ':' or '-'", e.ID)
	}
	if _, err := tx.Endpoint(e.ID); err == nil {
		return nil, nil, model.Conflictf("endpoint %q already exists", e.ID)
	}
	if e.IfName == "" {
		e.IfName = "eth0"
	}
	if !core.IfnameRE.MatchString(e.IfName) || e.IfName == "." || e.IfName == ".." {
		return nil, nil, model.Fieldf("ifname", "%q: must be 1-15 letters, digits, '_', '.' or '-'", e.IfName)
	}
	switch {
	case req.VM: // a guest's tap: no netns (the VM feature's check)
	case req.VethOnly && req.Netns != "":
		return nil, nil, model.Fieldf("netns", "%q: a veth-only endpoint takes no netns (the runtime moves the interface)", req.Netns)
	case !req.VethOnly && req.Netns == "":
		return nil, nil, model.Fieldf("netns", "missing: give a namespace name or path, or ask for a veth-only endpoint")
	case !req.VethOnly:
		if e.Netns, err = netconf.ResolveNetns(req.Netns); err != nil {
			return nil, nil, err
		}
		if err := netconf.CheckIfNameFree(e.Netns, e.IfName); err != nil {
			return nil, nil, err
		}
	}
	for _, s := range req.IPs {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, nil, model.Fieldf("ips", "%q: not an IP address", s)
		}
		e.IPs = append(e.IPs, a.Unmap())
	}
	if req.MAC != "" {
		// Kept in e.MAC until applyEndpoint gives it to the veth peer.
		mac, err := net.ParseMAC(req.MAC)
		if err != nil || len(mac) != 6 || mac[0]&1 != 0 || [6]byte(mac) == [6]byte{} {
			return nil, nil, model.Fieldf("mac", "%q: not a unicast Ethernet address", req.MAC)
		}
		e.MAC = mac.String()
	}
	e.HostIf, e.PeerIf = hostIfNames(e.ID)
	// Then each feature's part (core.EndpointValidator).
	for _, v := range d.epChecks {
		if err := v.ValidateEndpoint(tx, &req, e, n); err != nil {
			return nil, nil, err
		}
	}
	return e, n, nil
}

// AddEndpoint creates an endpoint: leases its addresses, builds the veth
// pair, configures both sides and programs the datapath. Any failure undoes
// all of it, leases included.
func (d *Daemon) AddEndpoint(req api.EndpointAdd) (*model.Endpoint, error) {
	return d.addEndpoint(req, nil)
}

// addEndpoint is AddEndpoint for an endpoint that is att's (a CNI
// attachment, attachment.go) or nobody's (nil).
func (d *Daemon) addEndpoint(req api.EndpointAdd, att *model.Attachment) (*model.Endpoint, error) {
	e, err := d.addEndpointLocked(req, att)
	if err == nil && !e.VM && !e.VethOnly() {
		// Both ends are up, but the kernel reports the host side's
		// carrier from a work queue: wait for it, outside the lock, so
		// that the caller sees "ready" and traffic can flow at once.
		netconf.WaitHostUp(e, hostUpWait)
	}
	return e, err
}

// hostUpWait bounds WaitHostUp; on a loaded node the kernel's link watch
// runs late (seen: more than the time an API call takes, in an emulated VM).
const hostUpWait = 5 * time.Second

func (d *Daemon) addEndpointLocked(req api.EndpointAdd, att *model.Attachment) (*model.Endpoint, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var e *model.Endpoint
	var n *model.Network
	applied := false
	err := d.store.Update(func(tx *store.Tx) error {
		var err error
		if e, n, err = d.validateEndpoint(tx, req); err != nil {
			return err
		}
		e.Attachment = att
		if e.IPs, err = ipam.Allocate(tx, n, e.ID, e.IPs); err != nil {
			return err
		}
		applied = true
		if err := d.applyEndpoint(e, n); err != nil {
			return err
		}
		return tx.PutEndpoint(e)
	})
	if err != nil {
		if applied {
			if uerr := d.unapplyEndpoint(e, n); uerr != nil {
				d.log.Error("roll back endpoint", "endpoint", e.ID, "err", uerr)
			}
		}
		return nil, err
	}
	d.log.Info("endpoint added", "endpoint", e.ID, "network", n.Name, "ips", e.IPs, "host_ifname", e.HostIf)
	return e, nil
}

// applyEndpoint makes the kernel match e. Idempotent.
func (d *Daemon) applyEndpoint(e *model.Endpoint, n *model.Network) error {
	wantMAC := e.MAC // asked for by the runtime, or recorded
	host, err := d.ensureDevice(e, n)
	if err != nil {
		return err
	}
	if wantMAC != "" && wantMAC != e.MAC {
		if err := netconf.SetPeerMAC(e, wantMAC); err != nil {
			return err
		}
	}
	if err := applyBigTCP(e, n, host); err != nil {
		return err
	}
	if err := d.faults.At("veth-created"); err != nil {
		return err
	}
	if !e.VethOnly() && !e.VM {
		if err := netconf.ConfigureContainer(e, n); err != nil {
			return err
		}
	}
	if err := d.faults.At("container-configured"); err != nil {
		return err
	}
	if err := netconf.ConfigureHost(e, host); err != nil {
		return err
	}
	if e.VethOnly() {
		if err := netconf.ConfigureOnLink(e, n, host); err != nil {
			return err
		}
	}
	if err := d.programEndpoint(e, n, host); err != nil {
		return err
	}
	if e.VM {
		return d.f.VMs.Serve(e, n)
	}
	return nil
}

// programEndpoint gives an endpoint the datapath of its network's mode and
// takes away any other mode's programs.
func (d *Daemon) programEndpoint(e *model.Endpoint, n *model.Network, host netlink.Link) error {
	if !n.Mode.BPF() {
		// Take away what a BPF mode left (nothing where BPF never loaded).
		for _, a := range e.IPs {
			if err := d.dp.DeleteEndpoint(a); err != nil {
				return err
			}
		}
		if err := d.syncPorts(portEntries(e), nil); err != nil {
			return err
		}
		if e.AFXDP() {
			if err := d.dp.DetachVMPort(e.PeerIf); err != nil {
				return err
			}
		}
		return d.dp.Detach(e.HostIf, host.Attrs().Index)
	}
	if err := d.dp.Available(); err != nil {
		return fmt.Errorf("network %q is in %s mode: %w", n.Name, n.Mode, err)
	}
	if e.VM {
		if err := vm.Mode(e, n.Mode); err != nil {
			return err
		}
	}
	// Native XDP_REDIRECT into the host veth needs NAPI on its peer. When
	// the peer is out of reach (a runtime moved it), the endpoint is not a
	// redirect target: traffic into it falls back to Linux, and inspect
	// says so.
	// A veth-only peer gets GRO while it is still down in the node's
	// namespace; measured on 6.18, that does not give it NAPI once the
	// runtime has moved it and brought it up, and xlane cannot reach it
	// there to toggle GRO again. Such endpoints are not redirect targets.
	target := n.Mode == model.ModeXDP && !e.VethOnly()
	if target {
		if err := netconf.SetContainerGRO(e, true); errors.Is(err, netconf.ErrPeerUnreachable) {
			target = false
			d.log.Warn("xdp: peer of endpoint out of reach; redirects into it fall back to Linux", "endpoint", e.ID)
		} else if err != nil {
			return err
		}
	}
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return fmt.Errorf("endpoint %s mac %q: %w", e.ID, e.MAC, err)
	}
	// The endpoint is published first without XL_EP_XDP_TARGET, so no
	// program redirects into its veth before the devmap entry and the
	// peer's NAPI are in place; the flag comes last.
	put := func(target bool) error {
		val := model.NewEndpointEntry(n, e, host.Attrs().Index, mac, host.Attrs().HardwareAddr, target)
		for _, a := range e.IPs {
			if err := d.dp.PutEndpoint(a, val); err != nil {
				return err
			}
		}
		return nil
	}
	if err := put(false); err != nil {
		return err
	}
	if n.VLAN != 0 {
		if err := netconf.SetVLANProxy(n.VLAN, e.IPs, true); err != nil {
			return err
		}
	}
	if err := d.faults.At("datapath-programmed"); err != nil {
		return err
	}
	if err := d.attachPrograms(e, n, host); err != nil {
		return err
	}
	if e.AFXDP() {
		if err := d.f.VMs.AttachPort(e); err != nil {
			return err
		}
	}
	if err := d.syncPorts(nil, portEntries(e)); err != nil {
		return err
	}
	if target {
		return put(true)
	}
	return nil
}

// unapplyEndpoint removes every kernel object of e. Missing ones are fine.
func (d *Daemon) unapplyEndpoint(e *model.Endpoint, n *model.Network) error {
	var errs []error
	if e.VM {
		d.f.VMs.Stop(e.ID)
	}
	ifindex := 0
	if host, err := netconf.HostLink(e); err == nil {
		ifindex = host.Attrs().Index
	}
	errs = append(errs, d.dp.Detach(e.HostIf, ifindex))
	if e.AFXDP() {
		errs = append(errs, d.dp.DetachVMPort(e.PeerIf))
	}
	errs = append(errs, d.syncPorts(portEntries(e), nil))
	for _, a := range e.IPs {
		errs = append(errs, d.dp.DeleteEndpoint(a))
	}
	if n.VLAN != 0 {
		errs = append(errs, netconf.SetVLANProxy(n.VLAN, e.IPs, false))
	}
	errs = append(errs, netconf.DeleteVeth(e))
	return errors.Join(errs...)
}

// RemoveEndpoint removes an endpoint; a missing one is not an error.
func (d *Daemon) RemoveEndpoint(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, n, err := d.endpointAndNetwork(id)
	if errors.Is(err, model.ErrNotFound) && e == nil || e != nil && core.Hidden(e.Network) {
		return nil
	}
	if err != nil {
		return err
	}
	return d.removeEndpoint(e, n)
}

func (d *Daemon) removeEndpoint(e *model.Endpoint, n *model.Network) error {
	if err := d.unapplyEndpoint(e, n); err != nil {
		return fmt.Errorf("remove endpoint %s: %w", e.ID, err)
	}
	// Its flows go with it (masqueraded ones too): an address handed to
	// the next endpoint must not inherit them.
	if flows, err := d.dp.DeleteFlowsOf(hostPrefixes(e.IPs)); err != nil {
		return fmt.Errorf("remove endpoint %s: %w", e.ID, err)
	} else if flows > 0 {
		d.log.Info("removed endpoint's flows", "endpoint", e.ID, "entries", flows)
	}
	if err := d.pruneCounters(); err != nil {
		d.log.Warn("prune counters", "err", err)
	}
	err := d.store.Update(func(tx *store.Tx) error {
		if err := ipam.Release(tx, e.Network, e.IPs); err != nil {
			return err
		}
		return tx.DeleteEndpoint(e.ID)
	})
	if err == nil {
		d.objErrs.set(objEndpoint, e.ID, nil)
		d.log.Info("endpoint removed", "endpoint", e.ID, "network", e.Network)
	}
	return err
}

// Endpoints lists endpoints (of one network when network != "") with their
// state and counters.
func (d *Daemon) Endpoints(network string) ([]api.EndpointInfo, error) {
	var out []api.EndpointInfo
	err := d.store.View(func(tx *store.Tx) error {
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		if network != "" {
			if _, err := tx.Network(network); err != nil {
				return err
			}
		}
		for _, e := range eps {
			if network != "" && e.Network != network || core.Hidden(e.Network) {
				continue
			}
			n, err := tx.Network(e.Network)
			if err != nil {
				return err
			}
			out = append(out, d.endpointInfo(e, n))
		}
		return nil
	})
	return out, err
}

// Endpoint returns one endpoint with its state and counters.
func (d *Daemon) Endpoint(id string) (*api.EndpointInfo, error) {
	var out api.EndpointInfo
	err := d.store.View(func(tx *store.Tx) error {
		e, err := tx.Endpoint(id)
		if err != nil {
			return err
		}
		if core.Hidden(e.Network) { // the calibration's (internal/calibration)
			return model.NotFoundf("endpoint %q", id)
		}
		n, err := tx.Network(e.Network)
		if err != nil {
			return err
		}
		out = d.endpointInfo(*e, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func (d *Daemon) endpointInfo(e model.Endpoint, n *model.Network) api.EndpointInfo {
	info := api.EndpointInfo{Endpoint: e, Mode: n.Mode, State: "ready"}
	if msg := d.objErrs.get(objEndpoint, e.ID); msg != "" {
		info.State, info.Error = "degraded", msg
	}
	host, err := netconf.HostLink(&e)
	if err != nil {
		info.State = "host veth missing"
		return info
	}
	if s := host.Attrs().Statistics; s != nil {
		info.Sent = model.Counter{Packets: s.RxPackets, Bytes: s.RxBytes}
		info.Received = model.Counter{Packets: s.TxPackets, Bytes: s.TxBytes}
	}
	if e.VM {
		info.QEMUArgs = e.QEMUArgs("n0")
		if host.Attrs().OperState == netlink.OperDown {
			info.State = "waiting for QEMU (tap not opened)"
		}
		if n.Mode.BPF() {
			info.Datapath = d.dp.Hooks(e.HostIf)
			info.Reasons = d.reasonCounters(host.Attrs().Index)
		}
		if e.AFXDP() {
			d.f.VMs.PortInfo(&info, n)
		}
		info.Notes = append(info.Notes, d.f.VMs.Notes(e.ID)...)
		return info
	}
	off, offErr := netconf.ContainerOffloads(&e)
	info.Offloads = off
	if n.Mode == model.ModeXDP {
		switch {
		case e.VethOnly():
			info.Notes = append(info.Notes, "xdp: the runtime moved the container side where xlane cannot give it NAPI: redirects into this endpoint fall back to Linux (its own traffic still takes XDP)")
		case offErr != nil:
			info.Notes = append(info.Notes, "xdp: container side out of reach ("+offErr.Error()+"): redirects into this endpoint fall back to Linux")
		case !off["rx-gro"]:
			info.Notes = append(info.Notes, "xdp: GRO is off on the container side (no NAPI): redirects into this endpoint fall back to Linux")
		default:
			info.Notes = append(info.Notes, "xdp: GRO on the container side gives it NAPI for XDP_REDIRECT")
		}
		if !off["tx-tcp-segmentation"] {
			info.Notes = append(info.Notes, "xdp: the kernel turned TSO off on the container side when XDP was attached: TCP leaves the container in MTU-sized segments")
		}
	}
	if n.Mode == model.ModeXDPGeneric {
		info.Notes = append(info.Notes, "xdp-generic: XDP passes GSO packets larger than the MTU to the tc program, which redirects them (counted once, as its redirect)")
	}
	if host.Attrs().OperState != netlink.OperUp && host.Attrs().OperState != netlink.OperUnknown {
		info.State = "link " + host.Attrs().OperState.String()
	}
	if n.Mode.BPF() {
		info.Datapath = d.dp.Hooks(e.HostIf)
		info.Reasons = d.reasonCounters(host.Attrs().Index)
		// Packets redirected into the container skip the host veth's
		// transmit path; count them as received too.
		for _, r := range info.Reasons {
			if r.Reason == "fwd_peer" && r.Direction == datapath.DirIngress.String() {
				info.Received.Packets += r.Packets
				info.Received.Bytes += r.Bytes
			}
		}
	}
	return info
}

func (d *Daemon) reasonCounters(ifindex int) []api.ReasonCounter {
	cs, err := d.dp.Counters(ifindex)
	if err != nil {
		d.log.Warn("read counters", "err", err)
		return nil
	}
	// One line per reason and direction, whichever programs counted.
	type rd struct {
		r datapath.Reason
		d datapath.Dir
	}
	sum := map[rd]model.Counter{}
	for k, c := range cs {
		s := sum[rd{k.Reason, k.Dir}]
		s.Add(c)
		sum[rd{k.Reason, k.Dir}] = s
	}
	var out []api.ReasonCounter
	for r := datapath.Reason(0); r < datapath.ReasonMax; r++ {
		for _, dir := range []datapath.Dir{datapath.DirEgress, datapath.DirIngress} {
			if c, ok := sum[rd{r, dir}]; ok {
				out = append(out, api.ReasonCounter{
					Reason: r.String(), Direction: dir.String(), Drop: r.IsDrop(),
					Counter: c,
				})
			}
		}
	}
	return out
}

// pruneCounters drops the counters of devices that no longer exist.
func (d *Daemon) pruneCounters() error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	keep := map[int]bool{}
	for _, l := range links {
		keep[l.Attrs().Index] = true
	}
	return d.dp.PruneCounters(keep)
}

// Status reports what this node can do and what it is doing.
func (d *Daemon) Status() (*api.Status, error) {
	st := &api.Status{Version: Version, StatePath: d.cfg.StatePath, PinDir: d.cfg.PinDir, Uplink: d.cfg.Uplink}
	if d.cfg.Uplink != "" {
		if l, err := netlink.LinkByName(d.cfg.Uplink); err == nil && d.dp.OwnsXDP(d.cfg.Uplink) {
			st.UplinkXDPMode = datapath.XDPAttachMode(l.Attrs().Index)
		}
	}
	st.Modes = d.modeStatuses()
	st.Calibration = d.f.Calibration.Calibration()
	d.kernelStatus(st)
	err := d.store.View(func(tx *store.Tx) error {
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		eps, err := tx.Endpoints()
		// The calibration's are not the user's (internal/calibration).
		for _, n := range nets {
			if !core.Hidden(n.Name) {
				st.Networks++
			}
		}
		for _, e := range eps {
			if !core.Hidden(e.Network) {
				st.Endpoints++
			}
		}
		return err
	})
	st.Counters = d.reasonCounters(0)
	st.Monitor = !d.cfg.NoMonitor
	if d.dp.Available() == nil { // the mirror runs with the BPF datapath only
		st.NeighMirror = d.f.Neighbours.Status()
		if ci := d.f.Cluster.Info(); ci.NodeName != "" {
			st.Cluster = &ci
		}
		if m, err := d.dp.ServicesMemory(); err == nil {
			st.Services = &api.ServicesMemory{Services: m.Services, TableBytes: m.Tables, MapBytes: m.Maps,
				FixedBytes: m.Fixed, PerServiceBytes: m.PerService()}
		}
	}
	st.Health = d.f.Reporter.Health()
	st.VM = d.f.VMs.Status()
	d.addStatusParts(st)
	return st, err
}
