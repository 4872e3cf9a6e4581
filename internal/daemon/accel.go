package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

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

func (d *Daemon) selfTest() *accel.Report {
	return SelfTest(context.Background(), accel.Options{CaseTimeout: d.cfg.AccelCaseTimeout})
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
func (d *Daemon) EnableAccel(req api.AccelEnable) (*api.AccelStatus, error) {
	if err := d.dp.Available(); err != nil {
		return nil, err
	}
	c, err := accelConfig(req)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.accel.testing {
		return nil, model.Conflictf("the acceleration self-test is running")
	}
	r := d.selfTest()
	d.accel.report, d.accel.err = r, nil
	rec := store.AccelRecord{Enabled: true, Config: c}
	ign := accel.IgnoredCases()
	if !r.Passed(ign) {
		if err := d.dp.DisableAccel(); err != nil {
			d.log.Error("disable acceleration", "err", err)
		}
		if err := d.store.Update(func(tx *store.Tx) error { return tx.PutAccel(rec) }); err != nil {
			return nil, err
		}
		d.log.Warn("socket acceleration stays off: self-test failed", "kernel", r.Kernel, "result", r.Summary(ign))
		return nil, model.Conflictf("%s (xlane accel status shows each case; docs/accel.md, results by kernel)", r.Unavailable(ign))
	}
	if err := ensureOwnCgroup(c.Cgroup); err != nil {
		return nil, err
	}
	if err := d.dp.EnableAccel(settings(c)); err != nil {
		d.dp.DisableAccel()
		d.releaseOwnCgroup()
		return nil, err
	}
	if err := d.store.Update(func(tx *store.Tx) error { return tx.PutAccel(rec) }); err != nil {
		d.dp.DisableAccel()
		d.releaseOwnCgroup()
		return nil, err
	}
	d.log.Info("socket acceleration on", "cgroup", c.Cgroup, "nets", c.Nets, "ports", c.Ports, "self_test", r.Summary(ign))
	return d.accelStatusLocked()
}

// DisableAccel turns acceleration off; accelerated connections carry on
// over the normal path (datapath.DisableAccel).
func (d *Daemon) DisableAccel() (*api.AccelStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.dp.DisableAccel(); err != nil {
		return nil, err
	}
	err := d.store.Update(func(tx *store.Tx) error {
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
	d.releaseOwnCgroup()
	return d.accelStatusLocked()
}

// AccelStatus reports the state, the last self-test and the counters.
func (d *Daemon) AccelStatus() (*api.AccelStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.accelStatusLocked()
}

func (d *Daemon) accelStatusLocked() (*api.AccelStatus, error) {
	var rec store.AccelRecord
	if err := d.store.View(func(tx *store.Tx) (err error) { rec, err = tx.Accel(); return }); err != nil {
		return nil, err
	}
	st := &api.AccelStatus{State: "off", SelfTest: d.accel.report}
	if rec.Config.Cgroup != "" {
		c := rec.Config
		st.Config = &c
	}
	if d.dp.Available() == nil {
		ks, err := d.dp.AccelStatus()
		if err != nil {
			return nil, err
		}
		st.Sockets, st.Counters = ks.Sockets, ks.Counters
		if ks.Attached && ks.On {
			st.State = "on"
		}
	}
	switch {
	case d.accel.testing:
		st.State = "testing"
	case rec.Enabled && st.State != "on":
		st.State = "failed"
		if d.accel.err != nil {
			st.Reason = d.accel.err.Error()
		} else if r := d.accel.report; r != nil {
			st.Reason = r.Unavailable(accel.IgnoredCases())
		} else if d.dp.Available() != nil {
			st.Reason = d.dp.Available().Error()
		}
	}
	return st, nil
}

// reconcileAccel runs at start: acceleration the store wants on is tested
// again on this kernel (in the background; the pinned programs keep
// running meanwhile) and attached, or turned off if the test fails.
func (d *Daemon) reconcileAccel() {
	var rec store.AccelRecord
	if err := d.store.View(func(tx *store.Tx) (err error) { rec, err = tx.Accel(); return }); err != nil {
		d.log.Error("read acceleration record", "err", err)
		return
	}
	if !rec.Enabled {
		if err := d.dp.DisableAccel(); err != nil {
			d.log.Error("disable acceleration", "err", err)
		}
		return
	}
	d.mu.Lock()
	d.accel.testing = true
	d.mu.Unlock()
	go func() {
		r := d.selfTest()
		d.mu.Lock()
		defer d.mu.Unlock()
		d.accel.testing, d.accel.report, d.accel.err = false, r, nil
		select {
		case <-d.done:
			return
		default:
		}
		ign := accel.IgnoredCases()
		if !r.Passed(ign) {
			d.log.Warn("socket acceleration off: self-test failed on this kernel", "kernel", r.Kernel, "result", r.Summary(ign))
			if err := d.dp.DisableAccel(); err != nil {
				d.log.Error("disable acceleration", "err", err)
			}
			return
		}
		err := ensureOwnCgroup(rec.Config.Cgroup)
		if err == nil {
			err = d.dp.EnableAccel(settings(rec.Config))
		}
		if err != nil {
			d.log.Error("socket acceleration off", "err", err)
			d.accel.err = fmt.Errorf("attach at start: %w", err)
			d.dp.DisableAccel()
			return
		}
		d.log.Info("socket acceleration on", "cgroup", rec.Config.Cgroup, "self_test", r.Summary(ign))
	}()
}
