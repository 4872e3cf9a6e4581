package daemon

import (
	"fmt"
	"reflect"

	"github.com/xlane-dev/xlane/internal/accelproxy"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibration"
	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/firewall/control"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/observe"
	"github.com/xlane-dev/xlane/internal/policy"
	"github.com/xlane-dev/xlane/internal/services"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/vm"
)

// Features are the feature packages the core calls at fixed points of the
// start (Start) and of an object's life: internal/xlaned makes each with the
// core (Daemon.Core) and the handles it needs, and hands them to Register
// between Open and Start. Every field is needed; a feature that has a
// validator (core.NetworkValidator, core.EndpointValidator) has it called
// at the validation's fixed points.
type Features struct {
	// Calibration: what auto means here.
	Calibration *calibration.Runner
	// Cluster: nodes, peers, the overlay; not joined alone.
	Cluster *cluster.Cluster
	// Neighbours is the neighbour mirror (internal/cluster).
	Neighbours *cluster.Neighbours
	// VMs: VM endpoints' taps, DHCP, QEMU.
	VMs *vm.VMs
	// Services: service VIPs and backends.
	Services *services.Services
	// Firewall: the rule set, DDoS, the blocklist (started by Start,
	// before the API serves).
	Firewall *control.Firewall
	// Policies: standalone ClusterNetworkPolicies, compiled into the
	// firewall (started after it); endpoints' labels.
	Policies *policy.Policies
	// Sockets: socket acceleration, proxy redirects.
	Sockets *accelproxy.Control
	// Observe: monitor, trace, flows, dumps (started by Start after the
	// firewall); Reporter the status' health and the metrics.
	Observe  *observe.Observer
	Reporter *observe.Reporter
}

// Register hands the daemon its features (between Open and Start) and
// collects their validators, in the order of Features' fields.
func (d *Daemon) Register(f Features) {
	d.f = f
	d.netChecks, d.epChecks = nil, nil
	for _, x := range []any{f.Calibration, f.Cluster, f.Neighbours, f.VMs, f.Services, f.Firewall, f.Policies, f.Sockets, f.Observe, f.Reporter} {
		if v, ok := x.(core.NetworkValidator); ok {
			d.netChecks = append(d.netChecks, v)
		}
		if v, ok := x.(core.EndpointValidator); ok {
			d.epChecks = append(d.epChecks, v)
		}
	}
}

// missing refuses to start without every feature: a field added to
// Features that the wiring (xlaned.Features) does not fill fails the
// start, naming it.
func (f *Features) missing() error {
	v := reflect.ValueOf(f).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsNil() {
			return fmt.Errorf("daemon: start without feature %s (Register it first)", v.Type().Field(i).Name)
		}
	}
	return nil
}

// close stops the features' work that does not end with the core's Done
// (the registered ones: Close may come before Register).
func (f *Features) close() {
	if f.VMs != nil {
		f.VMs.Close()
	}
	if f.Calibration != nil {
		f.Calibration.Close() // a calibration at start removes its networks first
	}
	f.Observe.Close() // nil: a no-op
	if f.Cluster != nil {
		f.Cluster.Close()
	}
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

// Config is the daemon's configuration as Open resolved it (its defaults
// filled in, the cluster's uplink set): what the features are made with.
func (d *Daemon) Config() Config { return d.cfg }

// Calibrator is the calibration feature (GET/POST /v1/calibration).
func (d *Daemon) Calibrator() *calibration.Runner { return d.f.Calibration }

// Reporter is the status' health summary and the metrics' snapshot
// (internal/observe: a Prometheus scrape's source).
func (d *Daemon) Reporter() *observe.Reporter { return d.f.Reporter }

// Sockets is the socket layer's control: acceleration and proxy
// redirects (/v1/accel, /v1/proxy).
func (d *Daemon) Sockets() *accelproxy.Control { return d.f.Sockets }

// Services is the services feature (/v1/services).
func (d *Daemon) Services() *services.Services { return d.f.Services }

// Firewall is the firewall's control (/v1/firewall), which Start started.
func (d *Daemon) Firewall() *control.Firewall { return d.f.Firewall }

// Policies is standalone mode's ClusterNetworkPolicies (/v1/policies).
func (d *Daemon) Policies() *policy.Policies { return d.f.Policies }

// Cluster is the cluster feature: nodes, peers, the overlay (/v1/nodes).
func (d *Daemon) Cluster() *cluster.Cluster { return d.f.Cluster }

// Observe is the observability feature (monitor, trace, flows, dumps).
func (d *Daemon) Observe() *observe.Observer { return d.f.Observe }
