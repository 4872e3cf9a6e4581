// Command scale is the cluster-scale benchmark (issue 32, `make bench
// BENCH=scale`): one real xlaned in Kubernetes mode against a real
// kube-apiserver whose cluster is simulated by kwok (sigs.k8s.io/kwok,
// scripts/kwok-bins.sh): N Nodes with pod CIDRs, 30 pods per node made
// Running with addresses from them, S Services (ClusterIP, NodePort and
// LoadBalancer mixed, 1-50 endpoints each, EndpointSlices by the real
// kube-controller-manager), P NetworkPolicies; and real traffic on real
// pods throughout.
//
//	go run ./bench/scale -out bench/results                 # 1,000 nodes, 30,000 pods, 20,000 Services, 2,000 policies
//	go run ./bench/scale -nodes 5000 -out bench/results     # the largest size
//	go run ./bench/scale -small                             # 500 nodes, 15,000 pods, 2,000 Services (TestScaleSmall's)
//	go run ./bench/scale -chart bench/results               # the growth table and bench/results/scale-growth.svg of the runs there
//
// Phases (cluster.go has the topology, phases.go the measurements):
//
//   - cold start: xlaned started against the full cluster, from its
//     process start to every Service, backend and node in its BPF maps
//     (read from the pinned maps, maps.go), with its CPU time, peak RSS
//     and the maps' kernel memory;
//   - churn: pod starts and stops (-pod-rate a second, each a delete of a
//     Service's pod and a create of its replacement on another node: the
//     controller manager updates the EndpointSlices), Service changes
//     (-svc-rate a second: a second port added or removed) and a rolling
//     node replacement (one node and its pods every -node-every); the delay
//     of each from the API write to the BPF map entry (a backend present,
//     or gone/draining; a service key present or gone; a node's pod CIDR in
//     xlane_peers) read from the maps every -poll, p50/p99/max;
//   - kube-apiserver restart: the LISTs xlaned makes afterwards (the API
//     server's audit log, audit.go), full syncs and service writes
//     (xlaned's log), a change after it;
//   - xlaned restart at full size: until it has synced again, its CPU and
//     RSS, the maps unchanged.
//
// Throughout, a client pod on xlaned's node connects once every 50 ms to
// a ClusterIP whose backends are two pods on that node and one on a second
// real node (over the overlay), and once every 50 ms to the remote pod
// directly (conns.go): every failure is counted, per phase.
//
// The Kubernetes binaries come from scripts/k8s-bins.sh, kwok from
// scripts/kwok-bins.sh (both cached under /var/cache/xlane). Everything is
// named xlbs-<random>-* and removed on exit, ^C included.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"os"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench scale: ")
	os.Exit(scaleMain(os.Args[1:]))
}

// options is the size of the cluster and the churn.
type options struct {
	nodes       int // simulated (kwok) nodes
	podsPerNode int
	services    int
	policies    int
	namespaces  int
	workers     int           // concurrent API calls creating the cluster
	churn       time.Duration // length of the churn phase
	podRate     float64       // pod replacements (a stop and a start) a second
	svcRate     float64       // Service changes a second
	nodeEvery   time.Duration // one node replaced every (0: none)
	poll        time.Duration // BPF map read interval
	out         string
	keepTmp     bool
}

// smallOptions is the form `make test` runs (TestScaleSmall): the issue's
// 500 nodes, 15,000 pods and 2,000 Services, with churn and an API server
// restart.
func smallOptions() options {
	return options{nodes: 500, podsPerNode: 30, services: 2000, policies: 200, namespaces: 20, workers: 32,
		churn: 20 * time.Second, podRate: 50, svcRate: 10, nodeEvery: 10 * time.Second, poll: 20 * time.Millisecond}
}

// largeOptions is the default run: the 1,000-node level.
func largeOptions() options {
	return options{nodes: 1000, podsPerNode: 30, services: 20000, policies: 2000, namespaces: 50, workers: 32,
		churn: 60 * time.Second, podRate: 100, svcRate: 10, nodeEvery: 10 * time.Second, poll: 20 * time.Millisecond}
}

func parseFlags(args []string) (options, error) {
	// -small changes the defaults: the flags given beside it still win.
	o := largeOptions()
	for _, a := range args {
		if a == "-small" || a == "--small" || a == "-small=true" || a == "--small=true" {
			o = smallOptions()
		}
	}
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.String("chart", "", "only `DIR`: the growth per object of the runs in DIR (scale-*.json; given alone) as a table and DIR/scale-growth.svg")
	fs.Bool("small", false, "the small form (500 nodes, 15,000 pods, 2,000 Services, 200 policies, 20 s of churn at 50 pods/s): what make test runs (TestScaleSmall); flags given beside it win")
	fs.IntVar(&o.nodes, "nodes", o.nodes, "simulated nodes (kwok)")
	fs.IntVar(&o.podsPerNode, "pods-per-node", o.podsPerNode, "pods per simulated node")
	fs.IntVar(&o.services, "services", o.services, "Services (60 % ClusterIP, 20 % NodePort, 20 % LoadBalancer; 1-50 endpoints each)")
	fs.IntVar(&o.policies, "policies", o.policies, "NetworkPolicies (namespace and pod selectors)")
	fs.IntVar(&o.namespaces, "namespaces", o.namespaces, "namespaces the Services, pods and policies are spread over")
	fs.IntVar(&o.workers, "workers", o.workers, "concurrent API calls creating the cluster")
	fs.DurationVar(&o.churn, "churn", o.churn, "length of the churn phase")
	fs.Float64Var(&o.podRate, "pod-rate", o.podRate, "pod replacements a second during the churn (each a stop and a start)")
	fs.Float64Var(&o.svcRate, "svc-rate", o.svcRate, "Service changes a second during the churn")
	fs.DurationVar(&o.nodeEvery, "node-every", o.nodeEvery, "during the churn, one node and its pods replaced every (0: none)")
	fs.DurationVar(&o.poll, "poll", o.poll, "interval of the BPF map reads that time the changes")
	fs.StringVar(&o.out, "out", "", "directory for scale-<date>.json and scale-latest.md (\"\": print only)")
	fs.BoolVar(&o.keepTmp, "keep-tmp", false, "keep the temp dir (logs of xlaned, kwok, the control plane; the audit log)")
	fs.BoolVar(&harness.Verbose, "v", false, "log every command")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.check()
}

// check says which field is out of range.
func (o options) check() error {
	switch {
	case o.nodes < 2 || o.nodes > maxNodes:
		return errors.New("-nodes: want 2 to 8000")
	case o.podsPerNode < 1 || o.podsPerNode > 200:
		return errors.New("-pods-per-node: want 1 to 200")
	case o.services < 1 || o.services > o.nodes*o.podsPerNode:
		return errors.New("-services: want 1 to the number of pods (each Service has a pod at least)")
	case o.services > 30000:
		return errors.New("-services: want at most 30,000 (the NodePort range, 20 % NodePort and 20 % LoadBalancer)")
	case o.policies < 0:
		return errors.New("-policies: want >= 0")
	case o.namespaces < 1 || o.namespaces > o.services:
		return errors.New("-namespaces: want 1 to the number of Services")
	case o.workers < 1:
		return errors.New("-workers: want >= 1")
	case o.churn < 0 || o.podRate < 0 || o.svcRate < 0 || o.nodeEvery < 0:
		return errors.New("-churn, -pod-rate, -svc-rate, -node-every: want >= 0")
	case o.poll < time.Millisecond:
		return errors.New("-poll: want >= 1ms")
	}
	return nil
}

func scaleMain(args []string) int {
	// -chart DIR: the growth table and chart of DIR's runs, nothing run.
	if len(args) == 2 && (args[0] == "-chart" || args[0] == "--chart") {
		if err := chartMain(args[1]); err != nil {
			log.Print(err)
			return 1
		}
		return 0
	}
	o, err := parseFlags(args)
	if err != nil {
		log.Print(err)
		return 2
	}
	if err := harness.Preflight("network namespaces, BPF", true, "go", "ip", "nsenter"); err != nil {
		log.Print(err)
		return 1
	}
	return harness.Main("scale-", o.keepTmp, func(ctx context.Context, tmp string, undo *harness.UndoStack) error {
		rep, err := run(ctx, o, tmp, undo)
		if rep != nil {
			j, _ := json.MarshalIndent(rep, "", "  ")
			if perr := harness.PrintResults(o.out, "scale", rep.Started, markdown(rep), j); perr != nil {
				return errors.Join(err, perr)
			}
		}
		return err
	})
}
