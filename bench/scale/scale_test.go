package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

// TestScaleSmall is the small form of the benchmark (issue 32), in make
// test: 500 simulated nodes, 15,000 pods, 2,000 Services and 200
// NetworkPolicies on a real kube-apiserver, controller manager and kwok;
// xlaned's cold start, 20 s of churn (50 pod replacements and 10 Service
// changes a second, a node replaced every 10 s), a kube-apiserver restart
// and an xlaned restart. It asserts what is meaningful at this size:
//
//   - no connection of the real pods fails in any phase (a ClusterIP with
//     a backend across the overlay, and a pod on the other real node);
//   - every change of the churn reaches the BPF maps (none lost in 30 s),
//     within maxDelay at most and maxP99 at the 99th percentile;
//   - after the API server restart xlaned makes no full sync, writes no
//     service but the one changed after it, and relists each resource at
//     most once (client-go's resume after the new API server's watch cache
//     refuses the old resourceVersion);
//   - xlaned's restart never lowers the backends in the maps.
//
// The run's table is logged (t.Log); `go run ./bench/scale -small` runs the
// same with output to bench/results.
func TestScaleSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: TestScaleSmall runs a control plane, kwok and xlaned for minutes")
	}
	if os.Geteuid() != 0 {
		t.Skip("TestScaleSmall needs root (network namespaces, BPF)")
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var undo harness.UndoStack
	t.Cleanup(func() {
		if err := undo.Run(); err != nil {
			t.Error(err)
		}
	})
	rep, err := run(ctx, smallOptions(), t.TempDir(), &undo)
	if rep != nil {
		t.Log("\n" + markdown(rep))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TestScaleSmall took %v", time.Since(began).Round(time.Second))
	for _, msg := range checkSmall(rep) {
		t.Error(msg)
	}
}

// The delay bounds of the small form, from the API write to the map (a
// pod start includes kwok's status write and the controller manager's
// EndpointSlice update).
const (
	maxP99   = 2 * time.Second
	maxDelay = 10 * time.Second
)

// checkSmall returns what the run of the small form missed.
func checkSmall(rep *report) []string {
	var out []string
	for _, ph := range []string{"churn", "api-restart", "xlaned-restart"} {
		if len(rep.Conns[ph]) == 0 {
			out = append(out, fmt.Sprintf("%s: no connections checked", ph))
		}
		for tg, s := range rep.Conns[ph] {
			if s.Failed > 0 || s.OK == 0 {
				out = append(out, fmt.Sprintf("%s, %s: %d connections ok, %d failed %v", ph, tg, s.OK, s.Failed, s.Errors))
			}
		}
	}
	if c := rep.Churn; c == nil {
		out = append(out, "no churn measured")
	} else {
		for _, kind := range []string{"pod-start", "pod-stop", "svc-change", "node-change"} {
			d := c.Delays[kind]
			if d == nil || len(d.Ms) == 0 {
				out = append(out, fmt.Sprintf("churn: no %s seen in the maps", kind))
				continue
			}
			p99, mx := percentile(d.Ms, 99), maxOf(d.Ms)
			if d.Lost > 0 || p99 > ms(maxP99) || mx > ms(maxDelay) || math.IsNaN(p99) {
				out = append(out, fmt.Sprintf("churn %s: p99 %.0f ms (want <= %v), max %.0f ms (want <= %v), %d lost of %d",
					kind, p99, maxP99, mx, maxDelay, d.Lost, d.Lost+len(d.Ms)))
			}
		}
	}
	if a := rep.APIRestart; a == nil {
		out = append(out, "no API server restart measured")
	} else {
		if a.FullSyncs > 0 || a.ServiceWrites > 1 {
			out = append(out, fmt.Sprintf("after the API server restart: %d full syncs, %d service writes (want 0 and the one change)", a.FullSyncs, a.ServiceWrites))
		}
		for res, n := range a.Lists {
			if n > 1 {
				out = append(out, fmt.Sprintf("after the API server restart: %d LISTs of %s (want at most 1)", n, res))
			}
		}
	}
	if r := rep.Restart; r == nil {
		out = append(out, "no xlaned restart measured")
	} else if r.BackendsMin < r.Backends {
		out = append(out, fmt.Sprintf("xlaned restart: %d backend entries at the lowest, %d after", r.BackendsMin, r.Backends))
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Milliseconds()) }
