package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestCalibrateOutOfSight: while a calibration runs, a user's listings show
// none of its throwaway networks and endpoints (network ls, endpoint ls,
// status counts), and a user's `ct flush` (in a tight loop) neither fails
// nor breaks the calibration: it completes, and no error is left as the
// calibration's or the node's last error. A user's network in the
// benchmarking range does not stop it either.
func TestCalibrateOutOfSight(t *testing.T) {
	n := newNode(t)
	// A user's network in the subnets a calibration took first: the
	// calibration takes others.
	n.mustXlane(nil, "network", "create", "mine", "--subnet", "198.18.200.0/24", "--subnet", "fd78:6c63:616c:c8::/64")
	type result struct {
		c      api.Calibration
		stderr string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		var o string
		o, r.stderr, r.err = n.xlane("calibrate", "-o", "json")
		if r.err == nil {
			r.err = json.Unmarshal([]byte(o), &r.c)
		}
		done <- r
	}()
	var res result
	// A user flushing in a tight loop beside it, and one flush per
	// listing below.
	stopFlush, flushed := make(chan struct{}), make(chan []string)
	go func() {
		var errs []string
		for {
			select {
			case <-stopFlush:
				flushed <- errs
				return
			default:
			}
			if _, e, err := n.xlane("ct", "flush"); err != nil {
				errs = append(errs, err.Error()+": "+e)
			}
		}
	}()
	running, flushes := 0, 0
	for finished := false; !finished; {
		select {
		case res = <-done:
			finished = true
			continue
		case <-time.After(100 * time.Millisecond):
		}
		var st api.Status
		n.mustXlane(&st, "status")
		if st.Calibration != nil && st.Calibration.Running {
			running++
		}
		if st.Networks != 1 || st.Endpoints != 0 {
			t.Errorf("status during the calibration: %d networks, %d endpoints; want the user's one network (the calibration's are hidden)", st.Networks, st.Endpoints)
		}
		var nets []api.NetworkInfo
		n.mustXlane(&nets, "network", "ls")
		for _, nw := range nets {
			if nw.Name != "mine" {
				t.Errorf("network ls during the calibration shows %s", nw.Name)
			}
		}
		var eps []api.EndpointInfo
		n.mustXlane(&eps, "endpoint", "ls")
		for _, e := range eps {
			t.Errorf("endpoint ls during the calibration shows %s (network %s)", e.ID, e.Network)
		}
		if _, e, err := n.xlane("ct", "flush"); err != nil {
			t.Errorf("ct flush during the calibration: %v: %s", err, e)
		}
		flushes++
	}
	close(stopFlush)
	for _, e := range <-flushed {
		t.Errorf("ct flush during the calibration: %s", e)
	}
	if res.err != nil {
		t.Fatalf("calibrate with ct flushes beside it: %v: %s", res.err, res.stderr)
	}
	if running == 0 || flushes < 3 {
		t.Fatalf("saw the calibration running %d times, flushed %d times: the test did not overlap the calibration", running, flushes)
	}
	t.Logf("%d ct flushes beside the calibration: %s", flushes, res.c.Choice.Reason)
	var c api.Calibration
	n.mustXlane(&c, "calibrate", "--show")
	if c.LastError != "" || c.Choice == nil {
		t.Errorf("after the calibration: last error %q, choice %+v", c.LastError, c.Choice)
	}
	var st api.Status
	n.mustXlane(&st, "status")
	if h := st.Health; h != nil && h.LastError != nil && h.LastError.Level == "error" {
		t.Errorf("node's last error after the calibration: %+v", h.LastError)
	}
	n.mustXlane(nil, "network", "rm", "mine")
	if left := calibLeftovers(t, n); len(left) > 0 || strings.Contains(n.log.String(), "level=ERROR") {
		t.Errorf("after the calibration: leftovers %v; log:\n%s", left, n.log)
	}
}
