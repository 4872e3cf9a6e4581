package daemon

import (
	"log/slog"
	"time"

	"github.com/xlane-dev/xlane/internal/accelproxy"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/calibration"
	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/control"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/metrics"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/observe"
	"github.com/xlane-dev/xlane/internal/services"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/vm"
)

// coreView is the daemon as its feature packages see it (core.Core): a
// type of its own, so that the lock and the rest stay off *Daemon's API.
type coreView struct{ d *Daemon }

var _ core.Core = coreView{}

// Calibrator is the calibration feature (GET/POST /v1/calibration).
func (d *Daemon) Calibrator() *calibration.Runner { return d.calib }

// wireFeatures makes the feature packages' parts of d, each handed the core
// (d.cfg and d.log are set).
func (d *Daemon) wireFeatures() {
	c := coreView{d}
	d.vms = vm.New(c, d.cfg.QEMU, d.log)
	d.calib = calibration.New(c)
	d.svcs = services.New(c)
	d.sockets = accelproxy.New(c, accelproxy.Config{CaseTimeout: d.cfg.AccelCaseTimeout})
	d.netChecks = []core.NetworkValidator{d.calib, d.cluster}
	d.report = observe.NewReporter(c, observe.ReportDeps{
		Rules: func(tx *store.Tx) (map[string]observe.RuleSlot, error) {
			spec, err := control.ReadRuleSpec(tx)
			if err != nil || spec == nil {
				return nil, err
			}
			rules := make(map[string]observe.RuleSlot, len(spec.Slots))
			for name, slot := range spec.Slots {
				rules[name] = observe.RuleSlot{Slot: slot, Action: spec.Action(name)}
			}
			return rules, nil
		},
		RuleCounters: func() func(uint32) (firewall.Counter, error) {
			if d.fw == nil || d.fw.Available() != nil {
				return nil
			}
			return d.fw.Counter
		},
		Neigh:     d.neigh.Status,
		WireGuard: func() []metrics.WireGuardPeer { return d.cluster.WireGuardMetrics() },
	})
}

// checkNetwork runs the features' checks of a network at one point of
// validateNetwork (core.NetworkCheck); the first error refuses it.
func (d *Daemon) checkNetwork(tx *store.Tx, at core.NetworkCheck, req *api.NetworkCreate, n *model.Network) error {
	for _, v := range d.netChecks {
		if err := v.ValidateNetwork(tx, at, req, n); err != nil {
			return err
		}
	}
	return nil
}

// Reporter is the status' health summary and the metrics' snapshot
// (internal/observe: a Prometheus scrape's source).
func (d *Daemon) Reporter() *observe.Reporter { return d.report }

// Logger is the daemon's logger, which keeps the last warning or error
// for the health summary: the API server and the Docker driver log
// through it so that theirs count too.
func (d *Daemon) Logger() *slog.Logger { return d.log }

// Sockets is the socket layer's control: acceleration and proxy
// redirects (/v1/accel, /v1/proxy).
func (d *Daemon) Sockets() *accelproxy.Control { return d.sockets }

// Services is the services feature (/v1/services).
func (d *Daemon) Services() *services.Services { return d.svcs }

// ApplyServices applies a batch of services (k8s.Target).
func (d *Daemon) ApplyServices(req model.ServiceApply) (*model.ServiceApplyResult, error) {
	return d.svcs.Apply(req)
}

// Firewall is the firewall's control (/v1/firewall), which New started.
func (d *Daemon) Firewall() *control.Firewall { return d.fw }

// ApplyFirewallOwned is Firewall.ApplyOwned (k8s.Target: Kubernetes
// mode's NetworkPolicies).
func (d *Daemon) ApplyFirewallOwned(prefix string, owned []rules.Rule) error {
	return d.fw.ApplyOwned(prefix, owned)
}

// Cluster is the cluster feature: nodes, peers, the overlay (/v1/nodes).
func (d *Daemon) Cluster() *cluster.Cluster { return d.cluster }

// SyncNodes makes the cluster's nodes the given set (k8s.Target).
func (d *Daemon) SyncNodes(want []model.Node) error { return d.cluster.SyncNodes(want) }

// clusterConfig is the cluster's part of cfg.
func clusterConfig(cfg Config) cluster.Config {
	return cluster.Config{NodeName: cfg.NodeName, ClusterCIDRs: cfg.ClusterCIDRs, Routing: cfg.Routing,
		VXLANPort: cfg.VXLANPort, OverlayEncap: cfg.OverlayEncap, NodesFile: cfg.NodesFile,
		PeerProbeInterval: cfg.PeerProbeInterval, Uplink: cfg.Uplink,
		Encryption: cfg.Encryption, WireGuardPort: cfg.WireGuardPort, WireGuardEngine: cfg.WireGuardEngine,
		EncryptionStrict: cfg.EncryptionStrict}
}

// Observe is the observability feature (monitor, trace, flows, dumps).
func (d *Daemon) Observe() *observe.Observer { return d.obs }

// startObserve makes the observability feature once the datapath is open
// and the firewall started (its events name the firewall's rules).
func (d *Daemon) startObserve() {
	deps := observe.Deps{Nodes: d.cluster.Nodes}
	if d.calib != nil {
		deps.Probe = d.calib
	}
	if d.fw != nil {
		deps.RuleName = d.fw.RuleName
	}
	if d.cluster.Joined() {
		deps.OverlayPort = d.cluster.OverlayPort
	}
	d.obs = observe.New(coreView{d}, observe.Config{Uplink: d.cfg.Uplink, MonitorRate: d.cfg.MonitorRate, NoMonitor: d.cfg.NoMonitor}, deps)
}

func (c coreView) Lock()                         { c.d.mu.Lock() }
func (c coreView) Unlock()                       { c.d.mu.Unlock() }
func (c coreView) Log() *slog.Logger             { return c.d.log }
func (c coreView) Store() *store.Store           { return c.d.store }
func (c coreView) Datapath() datapath.Datapath   { return c.d.dp }
func (c coreView) Kernel() *features.Set         { return c.d.feat }
func (c coreView) Done() <-chan struct{}         { return c.d.done }
func (c coreView) FaultPoint(point string) error { return c.d.faults.At(point) }
func (c coreView) ModeMissing(m model.Mode) error {
	return c.d.modeMissing(m)
}
func (c coreView) ObjectError(kind, name string, err error) { c.d.objErrs.set(kind, name, err) }
func (c coreView) RememberForwarding4(dev string) error     { return c.d.rememberForwarding4(dev) }
func (c coreView) UpdateNodeConfig(fn func(*datapath.NodeConfig)) error {
	nc := c.d.node
	fn(&nc)
	if nc == c.d.node {
		return nil
	}
	if err := c.d.dp.SetConfig(nc); err != nil {
		return err
	}
	c.d.node = nc
	return nil
}
func (c coreView) CTGC() (runs, deleted uint64) {
	return c.d.ct.gcRuns.Load(), c.d.ct.gcDeleted.Load()
}
func (c coreView) Status() core.Status {
	d := c.d
	return core.Status{Started: d.started, Uplink: d.cfg.Uplink, GCInterval: d.cfg.GCInterval,
		GC: core.GCStatus{Runs: d.ct.gcRuns.Load(), Deleted: d.ct.gcDeleted.Load(),
			Duration: time.Duration(d.ct.gcNanos.Load()), LastRun: d.ct.lastRun(), LoopStart: unixNano(d.ct.loopUnixNano.Load())},
		LastError: d.lastErr.Get(), ObjectErrors: d.objErrs.all(), RunStats: d.runStats != nil}
}
func (c coreView) ReasonCounters(ifindex int) []api.ReasonCounter {
	return c.d.reasonCounters(ifindex)
}
func (c coreView) CreateNetwork(req api.NetworkCreate) (*model.Network, error) {
	return c.d.CreateNetwork(req)
}
func (c coreView) AddEndpoint(req api.EndpointAdd) (*model.Endpoint, error) {
	return c.d.AddEndpoint(req)
}
func (c coreView) RemoveNetwork(name string) error { return c.d.deleteNetwork(name, true) }
func (c coreView) DefaultMode(choice *calibrate.Choice) model.Mode {
	m, _ := c.d.autoFrom(choice, c.d.createNeeds(api.NetworkCreate{}))
	return m
}
