package xlaned

import (
	"context"

	"github.com/xlane-dev/xlane/internal/accelproxy"
	"github.com/xlane-dev/xlane/internal/calibration"
	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/firewall/control"
	"github.com/xlane-dev/xlane/internal/observe"
	"github.com/xlane-dev/xlane/internal/policy"
	"github.com/xlane-dev/xlane/internal/services"
	"github.com/xlane-dev/xlane/internal/vm"
)

// Start opens the daemon (the store, the datapath), makes its features and
// registers them (Features), and starts it: the kernel reconciled to the
// store, the features and the background work running. On any failure,
// or when ctx ends first, what was opened is closed.
func Start(ctx context.Context, cfg daemon.Config) (*daemon.Daemon, error) {
	d, err := daemon.Open(cfg)
	if err != nil {
		return nil, err
	}
	f, err := Features(d)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.Register(f)
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Features makes the feature packages the core calls (daemon.Features),
// each with d's core and the handles it needs of the others, from d's
// configuration as Open resolved it.
func Features(d *daemon.Daemon) (daemon.Features, error) {
	c, cfg := d.Core(), d.Config()
	cl, err := cluster.New(c, cfg.Cluster)
	if err != nil {
		return daemon.Features{}, err
	}
	fw := control.New(c, control.Config{Cluster: cl})
	calib := calibration.New(c)
	neigh := &cluster.Neighbours{}
	deps := observe.Deps{Nodes: cl.Nodes, Probe: calib, RuleName: fw.RuleName}
	if cl.Joined() {
		deps.OverlayPort = cl.OverlayPort
	}
	return daemon.Features{
		Cluster: cl, Neighbours: neigh, Calibration: calib, Firewall: fw, Policies: policy.New(c, fw),
		VMs:      vm.New(c, cfg.QEMU, c.Log()),
		Services: services.New(c),
		Sockets:  accelproxy.New(c, accelproxy.Config{CaseTimeout: cfg.AccelCaseTimeout}),
		Observe:  observe.New(c, observe.Config{Uplink: cfg.Uplink, MonitorRate: cfg.MonitorRate, NoMonitor: cfg.NoMonitor}, deps),
		Reporter: observe.NewReporter(c, observe.ReportDeps{Rules: fw.RuleSlots, RuleCounters: fw.Counters,
			Neigh: neigh.Status, WireGuard: cl.WireGuardMetrics}),
	}, nil
}
