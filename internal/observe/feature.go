package observe

import (
	"net/netip"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
)

// Config is what observability takes from xlaned's configuration.
type Config struct {
	// Uplink is the node's device towards other nodes (trace's default
	// entry point).
	Uplink string
	// MonitorRate bounds the monitor's events per second per CPU while a
	// client listens (0: DefaultMonitorRate).
	MonitorRate uint32
	// NoMonitor: the programs were loaded without the monitor's hooks.
	NoMonitor bool
}

// Deps are what other features tell observability so that events and
// traces name things; a nil field is a feature this daemon does not run.
type Deps struct {
	// RuleName is the firewall rule in a rule slot.
	RuleName func(slot uint32) (string, bool)
	// Nodes are the cluster's nodes (trace's route to another node).
	Nodes func() ([]model.Node, error)
	// OverlayPort is the cluster's VXLAN port (false: no cluster).
	OverlayPort func() (uint16, bool)
	// Probe is the calibration's probe lock: a conntrack flush waits for
	// the probe under way.
	Probe interface {
		LockProbe()
		UnlockProbe()
	}
}

// Observer is the observability feature: the monitor's event fan-out,
// `xlane trace`, the conntrack listing and the BPF map dumps.
type Observer struct {
	c    core.Core
	cfg  Config
	deps Deps
	mon  *monitor
	// tracer: `xlane trace`'s programs, loaded on first use (trace.go).
	tracer tracerCache
	// namer is SetNamer's, for a monitor started after it.
	namer *func(netip.Addr) string
}

// SetNamer gives the monitor's events the workload names of their
// addresses (api.MonitorEvent's SrcName, DstName, NATDstName): fn is the
// Hubble server's names (internal/hubble), "" for an address it does not
// know. It is called for each event described, so it must be quick.
// Before Start it is kept for the monitor Start makes.
func (o *Observer) SetNamer(fn func(netip.Addr) string) {
	o.namer = &fn
	if o.mon != nil {
		o.mon.namer.Store(&fn)
	}
}

// New makes the observability feature on c's datapath (which must be
// open): internal/xlaned makes it and hands it to the daemon, which starts it
// (Start) once its reconcile is done and the firewall started.
func New(c core.Core, cfg Config, deps Deps) *Observer {
	return &Observer{c: c, cfg: cfg, deps: deps}
}

// Start starts the monitor, which reads the datapath's ring until c is
// done.
func (o *Observer) Start() {
	o.mon = o.startMonitor()
	if o.namer != nil {
		o.mon.namer.Store(o.namer)
	}
}

// Close releases the tracer's programs.
func (o *Observer) Close() {
	if o != nil {
		o.tracer.close()
	}
}

// GCCloses starts collecting a conntrack GC pass's flow_close events (nil,
// a no-op, while no client wants them).
func (o *Observer) GCCloses() *GCCloses {
	if o == nil {
		return nil
	}
	return o.mon.gcCloses()
}

func (o *Observer) overlayPort() (uint16, bool) {
	if o.deps.OverlayPort == nil {
		return 0, false
	}
	return o.deps.OverlayPort()
}
