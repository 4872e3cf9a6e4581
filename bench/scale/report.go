package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// percentile is the p-th percentile (nearest rank) of xs.
func percentile(xs []float64, p float64) float64 { return measure.Percentile(xs, p) }

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return slices.Max(xs)
}

func mb(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

func lists(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

func markdown(rep *report) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	end := rep.Finished
	if end.IsZero() {
		end = time.Now()
	}
	w("Run of %s, %s → %s UTC: kernel %s, %d × %s; loadavg %s at the start, %s at the end; Kubernetes %s (kube-apiserver, kube-controller-manager), kwok %s; commit %s.\n\n",
		rep.Started.UTC().Format("2006-01-02 15:04"), rep.Started.UTC().Format("15:04"), end.UTC().Format("15:04"),
		rep.Kernel, rep.NProc, rep.CPU, rep.LoadStart, rep.LoadEnd, rep.K8sVersion, rep.Kwok, rep.GitCommit)
	w("Cluster: %d simulated nodes (kwok) + 2 real, %d pods, %d Services (60 %% ClusterIP, 20 %% NodePort, 20 %% LoadBalancer; 1-50 endpoints), %d NetworkPolicies; created in", rep.Nodes, rep.Pods, rep.Services, rep.Policies)
	for _, k := range []string{"nodes", "services", "pods", "policies"} {
		if d, ok := rep.Create[k]; ok {
			w(" %s %.1f s,", k, d.Seconds())
		}
	}
	w(" all pods Running and in their EndpointSlices %.1f s after the first create.\n\n", rep.ClusterReady.Seconds())
	w("| phase | time | xlaned CPU | RSS (peak) | BPF maps | service keys | backends | nodes | LISTs |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	row := func(name, what string, p *phase) {
		if p == nil {
			return
		}
		w("| %s | %s %.2f s | %.2f s | %.0f MB (%.0f MB) | %s + tables %s | %d | %d | %d | %s |\n", name, what, p.Took.Seconds(), p.CPU.Seconds(),
			p.RSSMB, p.PeakRSSMB, mb(p.MapBytes), mb(p.TableBytes), p.Services, p.Backends, p.Peers, lists(p.Lists))
	}
	row("cold start", "to programmed", rep.Cold)
	row("xlaned restart", "to its first full sync", rep.Restart)
	if c := rep.Churn; c != nil {
		w("\nChurn, %.0f s: %d pod starts and %d stops (EndpointSlices by the controller manager), %d Service changes (a port added or removed), %d nodes replaced with their pods; %d API errors. xlaned: CPU %.1f s (%.0f %% of a core), RSS %.0f MB at the end; LISTs: %s.\n\n",
			c.Duration.Seconds(), c.PodStarts, c.PodStops, c.SvcChanges, c.NodeOp, c.APIErrors, c.CPU.Seconds(), 100*c.CPU.Seconds()/max(c.Duration.Seconds(), 1e-9), c.RSSMB, lists(c.Lists))
		w("| change | seen | p50 | p99 | max | lost (30 s) | ambiguous | xlaned's part p50 / p99 / max |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, k := range slices.Sorted(maps.Keys(c.Delays)) {
			d := c.Delays[k]
			w("| %s | %d | %.0f ms | %.0f ms | %.0f ms | %d | %d | %.0f / %.0f / %.0f ms |\n", k, len(d.Ms), percentile(d.Ms, 50), percentile(d.Ms, 99), maxOf(d.Ms), d.Lost, d.Ambiguous,
				percentile(d.XlanedMs, 50), percentile(d.XlanedMs, 99), maxOf(d.XlanedMs))
		}
		w("\nFrom the API write (create, delete, update call) to the first read of the BPF maps that shows it: pod-start a backend with the pod's address taking new flows, pod-stop none left taking new flows (draining or gone), svc-change the added port's ClusterIP key present or the removed one's gone, node-change the node's pod CIDR in xlane_peers or gone. A pod start includes kwok's status write and the controller manager's EndpointSlice update. Ambiguous: already true when registered (an address reused), not timed. xlaned's part: from the bench's own watch seeing the change (the address ready or not in an EndpointSlice, the port in the Service, the Node added or gone) to the map; the rest is the control plane's.\n")
	}
	if a := rep.APIRestart; a != nil {
		w("\nkube-apiserver restart (etcd kept): down %.1f s; xlaned's LISTs afterwards: %s; %d full syncs, %d service writes, %d policy syncs; CPU %.2f s; a Service change after it in the maps %.0f ms later.\n",
			a.Down.Seconds(), lists(a.Lists), a.FullSyncs, a.ServiceWrites, a.PolicySyncs, a.CPU.Seconds(), a.ChangeMs)
	}
	if rep.Restart != nil {
		w("\nxlaned restart: backend entries never fewer than %d during it (%d before, %d after).\n", rep.Restart.BackendsMin, rep.Restart.BackendsBefore, rep.Restart.Backends)
	}
	w("\nReal traffic (a client pod on xlaned's node, a connection every 50 ms to each target):\n\n| phase | target | ok | failed |\n|---|---|---:|---:|\n")
	for _, ph := range []string{"churn", "api-restart", "xlaned-restart"} {
		for _, t := range slices.Sorted(maps.Keys(rep.Conns[ph])) {
			s := rep.Conns[ph][t]
			w("| %s | %s | %d | %d |\n", ph, t, s.OK, s.Failed)
		}
	}
	w("\nBPF maps read %d times, %.1f ms each on average.\n", rep.MapReads, rep.MapReadMs)
	for _, n := range rep.Notes {
		w("\n%s\n", n)
	}
	return b.String()
}
