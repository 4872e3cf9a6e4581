package accelproxy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Control is the socket layer's control: acceleration (accel.go) and
// transparent proxy redirects (proxy.go), which share xlane's own cgroup
// (owncgroup.go).
type Control struct {
	c     core.Core
	cfg   Config
	accel accelState
}

// Config is how the socket layer runs.
type Config struct {
	// CaseTimeout is how long each self-test case may take (0: 5 s).
	CaseTimeout time.Duration
}

// New is the socket layer's control of core c.
func New(c core.Core, cfg Config) *Control { return &Control{c: c, cfg: cfg} }

func (ap *Control) dp() datapath.Datapath { return ap.c.Datapath() }

// accelState is what the daemon knows of acceleration beyond the store:
// the last self-test and whether one runs.
type accelState struct {
	testing bool
	report  *accel.Report
	err     error // why the last attach at start failed, if it did
}

// SelfTest is how the daemon runs the self-test; tests replace it.
var SelfTest = func(ctx context.Context, o accel.Options) *accel.Report {
	return accel.SelfTest(ctx, o)
}

func (ap *Control) selfTest() *accel.Report {
	return SelfTest(context.Background(), accel.Options{CaseTimeout: ap.cfg.CaseTimeout})
}

// accelCgroup resolves the cgroup of a request: empty is xlane's own
// (created only when the request is applied: owncgroup.go); a named one
// must exist.
func accelCgroup(path, field string) (string, error) {
	if path == "" {
		own, err := ownCgroup()
		if err != nil {
			return "", model.Fieldf(field, "%v", err)
		}
		return own, nil
	}
	p, err := accel.CheckCgroup(path)
	if err != nil {
		return "", model.Fieldf(field, "%s", badConfig(err))
	}
	return p, nil
}

// badConfig is an accel validation error without its sentinel's text.
func badConfig(err error) string {
	return strings.TrimPrefix(err.Error(), accel.ErrBadConfig.Error()+": ")
}

func accelConfig(req api.AccelEnable) (accel.Config, error) {
	c := accel.Config{Ports: req.Ports}
	var err error
	if c.Cgroup, err = accelCgroup(req.Cgroup, "cgroup"); err != nil {
		return c, err
	}
	for _, n := range req.Nets {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return c, model.Fieldf("nets", "%q: not a CIDR prefix", n)
		}
		c.Nets = append(c.Nets, p)
	}
	validate := c.Validate
	if req.Cgroup == "" {
		validate = c.ValidateSettings // xlane's cgroup: made when applied
	}
	if err := validate(); err != nil {
		field := "nets"
		for _, p := range c.Ports {
			if p == 0 {
				field = "ports"
			}
		}
		return c, model.Fieldf(field, "%s", badConfig(err))
	}
	return c, nil
}

func settings(c accel.Config) datapath.AccelSettings {
	return datapath.AccelSettings{Cgroup: c.Cgroup, Nets: c.Nets, Ports: c.Ports}
}

// EnableAccel validates the request, runs the self-test on this kernel
// and, only if every case passes (xlane's own tests aside:
// accel.IgnoredCases), attaches acceleration. The request is recorded either way: a daemon restart
// tests again.
func (ap *Control) EnableAccel(req api.AccelEnable) (*api.AccelStatus, error) {
	if err := ap.dp().Available(); err != nil {
		return nil, err
	}
	c, err := accelConfig(req)
	if err != nil {
		return nil, err
	}
	ap.c.Lock()
	defer ap.c.Unlock()
	if ap.accel.testing {
		return nil, model.Conflictf("the acceleration self-test is running")
	}
	r := ap.selfTest()
	ap.accel.report, ap.accel.err = r, nil
	rec := store.AccelRecord{Enabled: true, Config: c}
	ign := accel.IgnoredCases()
	if !r.Passed(ign) {
		if err := ap.dp().DisableAccel(); err != nil {
			ap.c.Log().Error("disable acceleration", "err", err)
		}
		if err := ap.c.Store().Update(func(tx *store.Tx) error { return tx.PutAccel(rec) }); err != nil {
			return nil, err
		}
		ap.c.Log().Warn("socket acceleration stays off: self-test failed", "kernel", r.Kernel, "result", r.Summary(ign))
		return nil, model.Conflictf("%s (xlane accel status shows each case; docs/accel.md, results by kernel)", r.Unavailable(ign))
	}
	if err := ensureOwnCgroup(c.Cgroup); err != nil {
		return nil, err
	}
	if err := ap.dp().EnableAccel(settings(c)); err != nil {
		ap.dp().DisableAccel()
		ap.releaseOwnCgroup()
		return nil, err
	}
	if err := ap.c.Store().Update(func(tx *store.Tx) error { return tx.PutAccel(rec) }); err != nil {
		ap.dp().DisableAccel()
		ap.releaseOwnCgroup()
		return nil, err
	}
	ap.c.Log().Info("socket acceleration on", "cgroup", c.Cgroup, "nets", c.Nets, "ports", c.Ports, "self_test", r.Summary(ign))
	return ap.accelStatusLocked()
}

// DisableAccel turns acceleration off; accelerated connections carry on
// over the normal path (datapath.DisableAccel).
func (ap *Control) DisableAccel() (*api.AccelStatus, error) {
	ap.c.Lock()
	defer ap.c.Unlock()
	if err := ap.dp().DisableAccel(); err != nil {
		return nil, err
	}
	err := ap.c.Store().Update(func(tx *store.Tx) error {
		rec, err := tx.Accel()
		if err != nil {
			return err
		}
		rec.Enabled = false
		return tx.PutAccel(rec)
	})
	if err != nil {
		return nil, err
	}
	ap.releaseOwnCgroup()
	return ap.accelStatusLocked()
}

// AccelStatus reports the state, the last self-test and the counters.
func (ap *Control) AccelStatus() (*api.AccelStatus, error) {
	ap.c.Lock()
	defer ap.c.Unlock()
	return ap.accelStatusLocked()
}

func (ap *Control) accelStatusLocked() (*api.AccelStatus, error) {
	var rec store.AccelRecord
	if err := ap.c.Store().View(func(tx *store.Tx) (err error) { rec, err = tx.Accel(); return }); err != nil {
		return nil, err
	}
	st := &api.AccelStatus{State: "off", SelfTest: ap.accel.report}
	if rec.Config.Cgroup != "" {
		c := rec.Config
		st.Config = &c
	}
	if ap.dp().Available() == nil {
		ks, err := ap.dp().AccelStatus()
		if err != nil {
			return nil, err
		}
		st.Sockets, st.Counters = ks.Sockets, ks.Counters
		if ks.Attached && ks.On {
			st.State = "on"
		}
	}
	switch {
	case ap.accel.testing:
		st.State = "testing"
	case rec.Enabled && st.State != "on":
		st.State = "failed"
		if ap.accel.err != nil {
			st.Reason = ap.accel.err.Error()
		} else if r := ap.accel.report; r != nil {
			st.Reason = r.Unavailable(accel.IgnoredCases())
		} else if ap.dp().Available() != nil {
			st.Reason = ap.dp().Available().Error()
		}
	}
	return st, nil
}

// Start makes the kernel what the store says at the daemon's start: the
// proxy redirects (errors logged: the daemon runs on), acceleration
// (tested again in the background), and xlane's cgroup released if an
// older xlaned or a crash left it unused.
func (ap *Control) Start() {
	if err := ap.reconcileProxy(); err != nil {
		ap.c.Log().Error("reconcile proxy redirects", "err", err)
	}
	ap.reconcileAccel()
	ap.releaseOwnCgroup()
}

// reconcileAccel runs at start: acceleration the store wants on is tested
// again on this kernel (in the background; the pinned programs keep
// running meanwhile) and attached, or turned off if the test fails.
func (ap *Control) reconcileAccel() {
	var rec store.AccelRecord
	if err := ap.c.Store().View(func(tx *store.Tx) (err error) { rec, err = tx.Accel(); return }); err != nil {
		ap.c.Log().Error("read acceleration record", "err", err)
		return
	}
	if !rec.Enabled {
		if err := ap.dp().DisableAccel(); err != nil {
			ap.c.Log().Error("disable acceleration", "err", err)
		}
		return
	}
	ap.c.Lock()
	ap.accel.testing = true
	ap.c.Unlock()
	go func() {
		r := ap.selfTest()
		ap.c.Lock()
		defer ap.c.Unlock()
		ap.accel.testing, ap.accel.report, ap.accel.err = false, r, nil
		select {
		case <-ap.c.Done():
			return
		default:
		}
		ign := accel.IgnoredCases()
		if !r.Passed(ign) {
			ap.c.Log().Warn("socket acceleration off: self-test failed on this kernel", "kernel", r.Kernel, "result", r.Summary(ign))
			if err := ap.dp().DisableAccel(); err != nil {
				ap.c.Log().Error("disable acceleration", "err", err)
			}
			return
		}
		err := ensureOwnCgroup(rec.Config.Cgroup)
		if err == nil {
			err = ap.dp().EnableAccel(settings(rec.Config))
		}
		if err != nil {
			ap.c.Log().Error("socket acceleration off", "err", err)
			ap.accel.err = fmt.Errorf("attach at start: %w", err)
			ap.dp().DisableAccel()
			return
		}
		ap.c.Log().Info("socket acceleration on", "cgroup", rec.Config.Cgroup, "self_test", r.Summary(ign))
	}()
}
