// Command k8s is the Kubernetes service benchmark (issue 17, `make bench
// BENCH=k8s`): xlaned in Kubernetes mode against the real kube-proxy (the
// same build, k8s.io/kubernetes v1.34, in its iptables and its nftables
// mode), all three watching one real kube-apiserver, in the same run.
//
//	go run ./bench/k8s -out bench/results   # 1, 1,000, 10,000 Services; 3 reps x 5 s
//	go run ./bench/k8s -quick               # 1 and 1,000 Services, 1 rep x 2 s, 5 changes
//
// Measured, per mode (topo.go has the cluster):
//
//   - connections per second from a client pod through ClusterIPs (a
//     random one of the level's Services per connection: connect, read one
//     byte, close; 4 clients) with 1, 1,000 and 10,000 Services, modes
//     rotated per repetition;
//   - how far behind the API each proxy is when Services are created
//     (from the last create call of a level to a sample of its ClusterIPs
//     answering through the proxy), at every level but the largest;
//   - programming the largest level from nothing: every proxy is stopped
//     and what it programmed removed (kube-proxy --cleanup; xlane's
//     Kubernetes services pruned; checked: none of a sample of the
//     ClusterIPs answers), the level's Services are created, then each
//     proxy in turn (the others idle) is started, timed from its process
//     start to a sample of the ClusterIPs answering (probe.go);
//   - one EndpointSlice change at the largest level: the probe Service's
//     one endpoint moves between two backends, and a prober in each client
//     pod connects once a millisecond until the new backend answers (p50
//     and p99 over -changes changes, every proxy seeing the same change);
//   - first (pod2pod.go, -pod-to-pod): pod to pod across two nodes, xlane
//     against the reference bridge plugin + kube-proxy + the kernel's VXLAN.
//   - with -profile (profile.go), after the largest level's rate runs:
//     where a connection's CPU goes, per mode, under perf record -a -g,
//     bucketed (BPF, netfilter, TCP/IP, veth/skb, scheduler, userspace,
//     other), and the bound 1/(1−S) a proxy of share S sets on the rate.
//
// The Kubernetes binaries come from scripts/k8s-bins.sh (cached under
// /var/cache/xlane/k8s), the control plane from test/k8senv (the e2e
// tests' own), the load generator from test/tools/connrate (bench/nat's).
// Everything is named xlbk-<random>-* and removed on exit, ^C included.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/test/k8senv"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench k8s: ")
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "conn-client":
			os.Exit(connrate.Client(os.Args[2:]))
		case "conn-server":
			os.Exit(connrate.Server(os.Args[2:]))
		case "probe-ready":
			os.Exit(probeReady(os.Args[2:]))
		case "probe-change":
			os.Exit(probeChange(os.Args[2:]))
		}
	}
	os.Exit(k8sMain(os.Args[1:]))
}

type options struct {
	harness.RunFlags
	levels  []int
	modes   []string
	conc    int
	changes int
	sample  int
	workers int
	pod2pod bool
	profile bool
	// programTimeout: how long a proxy may take to program the largest
	// level from nothing; one that takes longer is stopped, reported so
	// and left out of the rest of the run.
	programTimeout time.Duration
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("k8s", flag.ContinueOnError)
	var levels, ms string
	o.Register(fs, harness.RunFlagsUsage{
		Quick:           "development run: levels 1,1000, 1 repetition of 2 s, 5 changes (unless given)",
		Reps:            "repetitions of the rate test; each runs every mode once, modes rotated",
		Duration:        "length of each rate run",
		DefaultDuration: 5 * time.Second,
		Out:             "directory for k8s-<date>.json and k8s-latest.md (\"\": print only)",
		KeepTmp:         "keep the temp dir (logs of xlaned, kube-proxy, servers)",
	})
	fs.StringVar(&levels, "levels", "1,1000,10000", "numbers of Services, in run order (only ever growing)")
	fs.StringVar(&ms, "modes", strings.Join(modes, ","), "modes to compare")
	fs.IntVar(&o.conc, "conc", 4, "concurrent connections of the rate test")
	fs.IntVar(&o.changes, "changes", 24, "EndpointSlice changes timed at the largest level")
	fs.IntVar(&o.sample, "sample", 200, "ClusterIPs probed to decide that a level is programmed")
	fs.IntVar(&o.workers, "workers", 32, "concurrent API calls creating the Services")
	fs.DurationVar(&o.programTimeout, "program-timeout", 2*time.Minute, "how long a proxy may take to program the largest level from nothing (one that takes longer is stopped, reported and left out of the rest)")
	fs.BoolVar(&o.profile, "profile", false, "after the largest level's rate runs, one more per mode under perf record -a -g: where a connection's CPU goes, bucketed (profile.go)")
	fs.BoolVar(&o.pod2pod, "pod-to-pod", true, "first, the second table: pod to pod across two nodes, xlane vs the bridge plugin + kube-proxy + kernel VXLAN (pod2pod.go)")
	if err := o.Parse(fs, args, map[string]string{"reps": "1", "duration": "2s", "levels": "1,1000", "changes": "5"}); err != nil {
		return o, err
	}
	var err error
	if o.levels, err = harness.ParseLevels(levels, maxServices, true); err != nil {
		return o, err
	}
	if o.modes, err = harness.ParseChoices("modes", ms, modes); err != nil {
		return o, err
	}
	switch {
	case o.Reps < 1:
		return o, errors.New("-reps: want >= 1")
	case o.Duration < time.Second:
		return o, errors.New("-duration: want >= 1s")
	case o.conc < 1:
		return o, errors.New("-conc: want >= 1")
	case o.changes < 1:
		return o, errors.New("-changes: want >= 1")
	case o.sample < 1:
		return o, errors.New("-sample: want >= 1")
	case o.workers < 1:
		return o, errors.New("-workers: want >= 1")
	}
	return o, nil
}

// sample is one rate run of one mode.
type sample struct {
	Level  int             `json:"services"`
	Mode   string          `json:"mode"`
	Rep    int             `json:"rep"`
	Result connrate.Result `json:"result"`
}

// report is everything one run found.
type report struct {
	harness.RunHeader
	K8sVersion string
	Iptables   string
	Nft        string
	APIReady   time.Duration
	// Create: per level, how long creating its new Services and slices
	// through the API took.
	Create map[int]time.Duration
	// Lag: per level and mode, from the last create call to the level's
	// sampled ClusterIPs answering.
	Lag     map[int]map[string]time.Duration
	Samples []sample
	// ChangeMs: per mode, each EndpointSlice change's latency (ms); a
	// change not seen in 10 s is left out and counted in ChangeLost.
	ChangeMs   map[string][]float64
	ChangeLost map[string]int
	// Program: per mode, from the proxy's (re)start to the largest
	// level's sampled ClusterIPs answering.
	Program map[string]time.Duration
	// NotProgrammed: per mode, why it is missing from Program (and from
	// the largest level's other measurements).
	NotProgrammed map[string]string
	// ProgramFromAPI: xlane only, from its API answering (the daemon
	// started: BPF objects loaded, pins adopted) to the same.
	ProgramFromAPI time.Duration
	// XlaneClient: the xlane client pod's datapath counters after the
	// rate tests (xlane endpoint inspect client), those not zero.
	XlaneClient []api.ReasonCounter
	// PodToPod: the second table (pod2pod.go).
	PodToPod []p2pResult
	// Profiles: -profile's breakdown, per mode (profile.go).
	Profiles []*profile
	Notes    []string
}

func k8sMain(args []string) int {
	o, err := parseFlags(args)
	if err != nil {
		log.Print(err)
		return 2
	}
	tools := []string{"go", "ip", "nsenter", "sysctl", "iptables-restore", "nft"}
	if o.profile {
		tools = append(tools, "perf")
	}
	if err := harness.Preflight("network namespaces, BPF, kube-proxy's rules", true, tools...); err != nil {
		log.Print(err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		log.Print(err)
		return 1
	}
	return harness.Main("k8s-", o.KeepTmp, func(ctx context.Context, tmp string, undo *harness.UndoStack) error {
		rep, err := run(ctx, o, self, tmp, undo)
		if err != nil {
			return err
		}
		j, _ := json.MarshalIndent(rep, "", "  ")
		return harness.PrintResults(o.Out, "k8s", rep.Started, markdown(rep, o), j)
	})
}

// repoRoot is the xlane module's directory (for scripts/ and deploy/).
func repoRoot(ctx context.Context) (string, error) {
	gomod, err := harness.Run(ctx, "go", "env", "GOMOD")
	gomod = strings.TrimSpace(gomod)
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run from inside the xlane module (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

func run(ctx context.Context, o options, self, tmp string, undo *harness.UndoStack) (*report, error) {
	rep := &report{RunHeader: harness.RunHeader{Started: time.Now(), NProc: runtime.NumCPU(), LoadStart: harness.LoadAvg(),
		Kernel: harness.KernelRelease(), CPU: harness.CPUModel(),
		Options: map[string]string{"duration": o.Duration.String(), "reps": fmt.Sprint(o.Reps), "conc": fmt.Sprint(o.conc),
			"levels": fmt.Sprint(o.levels), "modes": strings.Join(o.modes, ","), "changes": fmt.Sprint(o.changes),
			"sample": fmt.Sprint(o.sample), "pod-to-pod": fmt.Sprint(o.pod2pod), "profile": fmt.Sprint(o.profile)}},
		Create: map[int]time.Duration{}, Lag: map[int]map[string]time.Duration{}, ChangeMs: map[string][]float64{},
		ChangeLost: map[string]int{}, Program: map[string]time.Duration{}, NotProgrammed: map[string]string{}}
	if out, err := harness.Run(ctx, "git", "rev-parse", "--short", "HEAD"); err == nil {
		rep.GitCommit = strings.TrimSpace(out)
	}
	v, _ := harness.Run(ctx, "iptables", "--version")
	rep.Iptables = strings.TrimSpace(v)
	v, _ = harness.Run(ctx, "nft", "--version")
	rep.Nft = strings.TrimSpace(v)
	log.Printf("machine: kernel %s, %d CPUs, loadavg %s", rep.Kernel, rep.NProc, rep.LoadStart)
	root, err := repoRoot(ctx)
	if err != nil {
		return nil, err
	}
	k8sBins, err := k8senv.Bins(root, "kube-apiserver", "xlane-etcd", "kube-proxy")
	if err != nil {
		return nil, err
	}
	rep.K8sVersion = filepath.Base(filepath.Dir(k8sBins))
	bins, runID, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return nil, err
	}
	runID = strings.Replace(runID, "xlb-", "xlbk-", 1)

	// The underlay and the control plane.
	ul, cpNS := runID+"-ul", runID+"-cp"
	if err := harness.AddNamespaces(ctx, undo, ul, cpNS); err != nil {
		return nil, err
	}
	if err := harness.RunAll(ctx,
		[]string{"ip", "-n", ul, "link", "add", "br0", "type", "bridge"},
		[]string{"ip", "-n", ul, "link", "set", "br0", "up"},
		[]string{"ip", "-n", ul, "link", "add", "pcp", "type", "veth", "peer", "name", "ul0", "netns", cpNS},
		[]string{"ip", "-n", ul, "link", "set", "pcp", "master", "br0", "up"},
		[]string{"ip", "-n", cpNS, "addr", "add", cpAddr + "/24", "dev", "ul0"},
		[]string{"ip", "-n", cpNS, "link", "set", "ul0", "up"}); err != nil {
		return nil, err
	}
	cpDir := filepath.Join(tmp, "cp")
	if err := os.MkdirAll(cpDir, 0o700); err != nil {
		return nil, err
	}
	log.Printf("control plane: etcd + kube-apiserver %s (%s)", rep.K8sVersion, k8sBins)
	cp, err := k8senv.Start(ctx, k8senv.Options{Bins: k8sBins, Netns: cpNS, Addr: cpAddr, Dir: cpDir, ServiceCIDR: serviceCIDR,
		RBAC: filepath.Join(root, "deploy/kubernetes/rbac.yaml"), QPS: 1000})
	if err != nil {
		return nil, err
	}
	undo.Push("stop the control plane", func(context.Context) error {
		if o.KeepTmp {
			os.WriteFile(filepath.Join(cpDir, "logs.txt"), []byte(cp.Logs(1<<20)), 0o600)
		}
		return cp.Stop()
	})
	rep.APIReady = cp.Ready
	log.Printf("kube-apiserver ready in %v", cp.Ready.Round(time.Millisecond))
	if o.pod2pod {
		if err := podToPod(ctx, o, self, tmp, bins, k8sBins, ul, cp, runID, rep); err != nil {
			return nil, err
		}
	}

	// The nodes: xlane's first, whose pod addresses the others copy.
	var nodes []*k8sNode
	var ips []netip.Addr
	order := slices.Clone(o.modes)
	if i := slices.Index(order, "xlane"); i > 0 {
		order = append([]string{"xlane"}, slices.Delete(order, i, i+1)...)
	}
	maxLevel := o.levels[len(o.levels)-1]
	for i, m := range order {
		n := newNode(m, runID, tmp, bins, k8sBins, i, cp, undo)
		if err := n.createNode(ctx); err != nil {
			return nil, err
		}
		if ips == nil && m != "xlane" {
			// No xlane node to copy from: its IPAM's order.
			ips = []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("10.244.1.3"),
				netip.MustParseAddr("10.244.1.4"), netip.MustParseAddr("10.244.1.5")}
		}
		log.Printf("setup %s (node %s, servers on %d ports per backend)", m, n.name, maxLevel+1)
		if err := n.setup(ctx, ul, ips); err != nil {
			return nil, fmt.Errorf("setup %s: %w", m, err)
		}
		if m == "xlane" {
			ips = append([]netip.Addr{n.clientIP}, n.backendIPs...)
		}
		if err := n.startServers(ctx, self, maxLevel); err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		nodes = append(nodes, n)
	}
	byMode := map[string]*k8sNode{}
	for _, n := range nodes {
		byMode[n.mode] = n
	}
	nodes = nodes[:0]
	for _, m := range o.modes {
		nodes = append(nodes, byMode[m])
	}
	backends := byMode[order[0]].backendIPs

	// The probe Service: one endpoint, b1, on probePort.
	probeVIP, err := createService(ctx, cp, probeSvc, probePort, backends[:1])
	if err != nil {
		return nil, err
	}

	var vips []string // ClusterIP:port of s0, s1, ...
	for li, level := range o.levels {
		largest := li == len(o.levels)-1
		if largest {
			// The largest level is programmed from nothing: every proxy
			// stopped and its rules removed while the objects are
			// created, then started one at a time (programFromNothing).
			gone := append(sampleOf(vips, 19), probeVIP)
			if err := stopAll(ctx, self, tmp, nodes, gone); err != nil {
				return nil, err
			}
		}
		log.Printf("creating Services %d to %d (%d API workers)", len(vips), level-1, o.workers)
		t0 := time.Now()
		more, err := createServices(ctx, cp, len(vips), level, backends, o.workers)
		if err != nil {
			return nil, err
		}
		created := time.Now()
		rep.Create[level] = created.Sub(t0)
		vips = append(vips, more...)
		log.Printf("%d Services + EndpointSlices created in %.1f s", len(more), rep.Create[level].Seconds())
		sampleFile := filepath.Join(tmp, fmt.Sprintf("sample-%d", level))
		if largest {
			if err := writeLines(sampleFile, sampleOf(vips, o.sample)); err != nil {
				return nil, err
			}
			if nodes, err = programFromNothing(ctx, self, sampleFile, nodes, len(vips), o.programTimeout, rep); err != nil {
				return nil, err
			}
		} else if err := waitLag(ctx, self, sampleFile, nodes, level, more, created, o, rep); err != nil {
			return nil, err
		}
		targets := filepath.Join(tmp, fmt.Sprintf("targets-%d", level))
		if err := writeLines(targets, vips); err != nil {
			return nil, err
		}
		// Every path must work before it is measured.
		for _, n := range nodes {
			r, err := n.load(ctx, self, targets, time.Second, 1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n.mode, err)
			}
			if r.OK == 0 || r.Failed > 0 {
				return nil, fmt.Errorf("%s with %d Services: check run: %d ok, %d failed %v, e.g. %v", n.mode, level, r.OK, r.Failed, r.Errors, r.Examples)
			}
		}
		for r := 1; r <= o.Reps; r++ {
			for k := range nodes {
				n := nodes[(k+r-1)%len(nodes)]
				res, err := n.load(ctx, self, targets, o.Duration, o.conc)
				if err != nil {
					return nil, fmt.Errorf("%s %d Services: %w", n.mode, level, err)
				}
				rep.Samples = append(rep.Samples, sample{Level: level, Mode: n.mode, Rep: r, Result: res})
				log.Printf("%6d Services rep %d %-20s %8.0f conn/s  p50 %6.1f µs  p99 %7.1f µs  failed %d %v",
					level, r, n.mode, res.CPS, res.P50Us, res.P99Us, res.Failed, res.Errors)
			}
		}
		if largest && o.profile {
			if err := profileModes(ctx, o, self, targets, filepath.Join(tmp, "profile"), level, nodes, rep); err != nil {
				return nil, err
			}
		}
	}

	if n := byMode["xlane"]; n != nil {
		out, err := n.xlane(ctx, "-o", "json", "endpoint", "inspect", "client")
		if err != nil {
			return nil, err
		}
		var ep api.EndpointInfo
		if err := json.Unmarshal([]byte(out), &ep); err != nil {
			return nil, fmt.Errorf("xlane endpoint inspect client: %w", err)
		}
		for _, r := range ep.Reasons {
			if r.Packets > 0 {
				rep.XlaneClient = append(rep.XlaneClient, r)
			}
		}
	}

	// EndpointSlice changes at the largest level.
	log.Printf("%d EndpointSlice changes with %d Services", o.changes, len(vips))
	if err := measureChanges(ctx, o, self, cp, nodes, probeVIP, backends, rep); err != nil {
		return nil, err
	}

	rep.LoadEnd = harness.LoadAvg()
	rep.Finished = time.Now()
	return rep, nil
}

// waitLag waits for every proxy to answer at a sample of the level's new
// Services (the same sample probed in each client, concurrently) and
// records how long after the last create call each did.
func waitLag(ctx context.Context, self, sampleFile string, nodes []*k8sNode, level int, more []string, created time.Time, o options, rep *report) error {
	if err := writeLines(sampleFile, sampleOf(more, o.sample)); err != nil {
		return err
	}
	rep.Lag[level] = map[string]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done, err := n.probeReady(ctx, self, sampleFile)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %d Services: %w", n.mode, level, err)
				return
			}
			mu.Lock()
			rep.Lag[level][n.mode] = done.Sub(created)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, n := range nodes {
		log.Printf("%s: the last of %d new Services answering %v after its creation", n.mode, len(more), rep.Lag[level][n.mode].Round(time.Millisecond))
	}
	return nil
}

// stopAll stops every proxy and removes what it programmed; then none of
// the ClusterIPs gone may answer.
func stopAll(ctx context.Context, self, tmp string, nodes []*k8sNode, gone []string) error {
	f := filepath.Join(tmp, "gone")
	if err := writeLines(f, gone); err != nil {
		return err
	}
	for _, n := range nodes {
		log.Printf("%s: stopping, removing its rules", n.mode)
		if err := n.stopProxy(ctx); err != nil {
			return fmt.Errorf("%s: stop: %w", n.mode, err)
		}
	}
	// xlane keeps a closed TCP flow's translation for 10 s
	// (CT_TIMEOUT_TCP_CLOSE, bpf/lib/ct.h) and a SYN reusing its tuple
	// reopens it with the old backend: the rate test just before
	// cycled through the client's ports, so a probe now could reuse one.
	// Past that, nothing may answer.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(11 * time.Second):
	}
	for _, n := range nodes {
		if err := n.noneAnswers(ctx, self, f); err != nil {
			return fmt.Errorf("%s, stopped and its rules removed: %w", n.mode, err)
		}
	}
	return nil
}

// programFromNothing starts each proxy in turn (the others idle) with
// every Service in the API and times, from its process start, until the
// sampled ClusterIPs answer. A proxy that has not programmed them within
// timeout is stopped, recorded in rep.NotProgrammed and left out of the
// nodes returned (the rest of the run).
func programFromNothing(ctx context.Context, self, sampleFile string, nodes []*k8sNode, count int, timeout time.Duration, rep *report) ([]*k8sNode, error) {
	var kept []*k8sNode
	for _, n := range nodes {
		probe, err := n.startProbeReady(ctx, self, sampleFile, timeout)
		if err != nil {
			return nil, err
		}
		if err := n.startProxy(ctx); err != nil {
			return nil, fmt.Errorf("%s: start: %w", n.mode, err)
		}
		done, err := probe()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			rep.NotProgrammed[n.mode] = fmt.Sprintf("not programmed within %v of its start (%v); stopped, left out of the rest", timeout, err)
			log.Printf("%s: %s", n.mode, rep.NotProgrammed[n.mode])
			if err := n.proxy.Stop(ctx); err != nil {
				return nil, err
			}
			continue
		}
		kept = append(kept, n)
		rep.Program[n.mode] = done.Sub(n.proxyStarted)
		log.Printf("%s: %d Services programmed %.2f s after its start", n.mode, count, rep.Program[n.mode].Seconds())
		if n.mode == "xlane" {
			rep.ProgramFromAPI = done.Sub(n.proxyReady)
			log.Printf("xlane: %.2f s after its API answered", rep.ProgramFromAPI.Seconds())
		}
	}
	return kept, nil
}

// createService creates a ClusterIP Service name (port servicePort) and
// its EndpointSlice: the backends on port, ready. It returns the
// ClusterIP:port.
func createService(ctx context.Context, cp *k8senv.ControlPlane, name string, port int, backends []netip.Addr) (string, error) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: servicePort,
			TargetPort: intstr.FromInt(port)}}}}
	var s *corev1.Service
	if err := k8senv.Retry(ctx, func() (err error) {
		s, err = cp.CS.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{})
		return err
	}); err != nil {
		return "", fmt.Errorf("create service %s: %w", name, err)
	}
	if s == nil || s.Spec.ClusterIP == "" { // a retry found it created: read its ClusterIP back
		var err error
		if s, err = cp.CS.CoreV1().Services(benchNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return "", fmt.Errorf("get service %s: %w", name, err)
		}
	}
	if err := k8senv.Retry(ctx, func() error {
		_, err := cp.CS.DiscoveryV1().EndpointSlices(benchNS).Create(ctx, slice(name, port, backends), metav1.CreateOptions{})
		return err
	}); err != nil {
		return "", fmt.Errorf("create endpointslice of %s: %w", name, err)
	}
	return fmt.Sprintf("%s:%d", s.Spec.ClusterIP, servicePort), nil
}

func slice(service string, port int, backends []netip.Addr) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: service + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "xlane-bench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(port))}},
	}
	for _, b := range backends {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{b.String()}, NodeName: ptr.To("xlane"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return es
}

// createServices creates Services s<from> to s<to-1>, service i's backends
// on backendPort+i, with workers concurrent calls, and returns their
// ClusterIP:port in order.
func createServices(ctx context.Context, cp *k8senv.ControlPlane, from, to int, backends []netip.Addr, workers int) ([]string, error) {
	out := make([]string, to-from)
	jobs := make(chan int)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if errs[w] != nil {
					continue
				}
				out[i-from], errs[w] = createService(ctx, cp, fmt.Sprintf("s%d", i), backendPort+i, backends)
			}
		}()
	}
	for i := from; i < to; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return out, errors.Join(errs...)
}

// measureChanges moves the probe Service's endpoint between b1 and b2
// o.changes times; for each change a prober per client (probe-change)
// times when the new backend answers, from the update call.
func measureChanges(ctx context.Context, o options, self string, cp *k8senv.ControlPlane, nodes []*k8sNode, vip string,
	backends []netip.Addr, rep *report) error {
	var probers []*connrate.ChangeProber
	for _, n := range nodes {
		p, err := n.startChangeProber(self, vip)
		if err != nil {
			return err
		}
		defer p.Close()
		probers = append(probers, p)
	}
	for k := 0; k < o.changes; k++ {
		b := 1 + (k+1)%2 // b2, b1, b2, ...
		// Each proxy must have applied the previous change (the old
		// backend answers) before the next is timed.
		for _, p := range probers {
			if err := p.Settled(byte('0' + 3 - b)); err != nil {
				return err
			}
		}
		for _, p := range probers {
			if err := p.Expect(byte('0' + b)); err != nil {
				return err
			}
		}
		es := slice(probeSvc, probePort, backends[b-1:b])
		t0 := time.Now()
		if _, err := cp.CS.DiscoveryV1().EndpointSlices(benchNS).Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update the probe's EndpointSlice: %w", err)
		}
		var line []string
		for i, p := range probers {
			done, err := p.Result()
			if err != nil {
				rep.ChangeLost[nodes[i].mode]++
				line = append(line, fmt.Sprintf("%s: %v", nodes[i].mode, err))
				continue
			}
			ms := float64(done.Sub(t0).Microseconds()) / 1000
			rep.ChangeMs[nodes[i].mode] = append(rep.ChangeMs[nodes[i].mode], ms)
			line = append(line, fmt.Sprintf("%s %.1f ms", nodes[i].mode, ms))
		}
		log.Printf("change %d (to b%d): %s", k+1, b, strings.Join(line, ", "))
		// kube-proxy syncs at most once a second (minSyncPeriod): the
		// next change starts a fresh sync rather than queue behind one.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(1100 * time.Millisecond):
		}
	}
	return nil
}

// sampleOf is up to n of xs: the last, then random others, without repeats.
func sampleOf(xs []string, n int) []string {
	if len(xs) <= n {
		return slices.Clone(xs)
	}
	out := []string{xs[len(xs)-1]}
	for _, i := range rand.Perm(len(xs) - 1)[:n-1] {
		out = append(out, xs[i])
	}
	return out
}

func writeLines(path string, lines []string) error {
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
