package daemon

import (
	"log/slog"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// coreView is the daemon as its feature packages see it (core.Core): a
// type of its own, so that the lock and the rest stay off *Daemon's API.
type coreView struct{ d *Daemon }

var _ core.Core = coreView{}

// Logger is the daemon's logger, which keeps the last warning or error
// for the health summary: the API server and the Docker driver log
// through it so that theirs count too.
func (d *Daemon) Logger() *slog.Logger { return d.log }

// ApplyServices applies a batch of services (k8s.Target).
func (d *Daemon) ApplyServices(req model.ServiceApply) (*model.ServiceApplyResult, error) {
	return d.f.Services.Apply(req)
}

// ApplyFirewallOwned is Firewall.ApplyOwned (k8s.Target: Kubernetes
// mode's NetworkPolicies).
func (d *Daemon) ApplyFirewallOwned(prefix string, owned []rules.Rule) error {
	return d.f.Firewall.ApplyOwned(prefix, owned)
}

// SyncNodes makes the cluster's nodes the given set (k8s.Target).
func (d *Daemon) SyncNodes(want []model.Node) error { return d.f.Cluster.SyncNodes(want) }

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
