package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

// TestScaleSmall is the small form of the benchmark (issue 32), last in
// make test (4 min 43 s at a load of 14-20, 2026-11-30): 500 simulated nodes, 15,000 pods, 2,000 Services and 200
// NetworkPolicies on a real kube-apiserver, controller manager and kwok;
// xlaned's cold start, 20 s of churn (50 pod replacements and 10 Service
// changes a second, a node replaced every 10 s), a kube-apiserver restart
// and an xlaned restart. It asserts what is meaningful at this size:
//
//   - no connection of the real pods fails in any phase (a ClusterIP with
//     a backend across the overlay, and a pod on the other real node);
//   - every change of the churn reaches the BPF maps within 30 s (1 % of
//     the pod starts excepted: kwok's);
//   - after the API server restart xlaned makes no full sync and relists
//     each resource at most once per informer (client-go's resume after the new API server's watch cache
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

// The delays are bounded by expectTimeout (a change not in the maps
// within 30 s is lost): none may be lost but pod starts, of which 1 % may
// (kwok 0.8 refuses now and then to give a pod its address). Tighter
// bounds do not hold on a loaded machine: the delays are the control
// plane's (kwok plays a pod start in ~20 s at a load of 25), and a
// Service change reached the maps in 65 ms on a calm API server but in
// seconds under the churn (docs/benchmarks.md); the figures are logged.
const podStartLost = 0.01

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
			allowed := 0
			if kind == "pod-start" {
				allowed = int(podStartLost * float64(d.Lost+len(d.Ms)))
			}
			if d.Lost > allowed {
				out = append(out, fmt.Sprintf("churn %s: %d of %d changes not in the maps within %v (want at most %d); p99 of the others %.0f ms",
					kind, d.Lost, d.Lost+len(d.Ms), expectTimeout, allowed, percentile(d.Ms, 99)))
			}
		}
	}
	if a := rep.APIRestart; a == nil {
		out = append(out, "no API server restart measured")
	} else {
		if a.FullSyncs > 0 {
			out = append(out, fmt.Sprintf("after the API server restart: %d full syncs (want none)", a.FullSyncs))
		}
		// Each informer lists at most once: as many LISTs of a resource
		// as xlaned's cold start made (services: two informers, the
		// Kubernetes mode's and the LoadBalancer allocator's).
		for res, n := range a.Lists {
			if rep.Cold == nil || n > rep.Cold.Lists[res] {
				out = append(out, fmt.Sprintf("after the API server restart: %d LISTs of %s (want at most one per informer)", n, res))
			}
		}
	}
	if r := rep.Restart; r == nil {
		out = append(out, "no xlaned restart measured")
	} else if r.BackendsMin < r.BackendsBefore {
		out = append(out, fmt.Sprintf("xlaned restart: %d backend entries at the lowest, %d before it", r.BackendsMin, r.BackendsBefore))
	}
	return out
}
