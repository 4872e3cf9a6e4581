package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/test/k8senv"
)

// report is everything one run found (the JSON; report.go the table).
type report struct {
	harness.RunHeader
	K8sVersion, Kwok string
	Nodes, Pods      int
	Services         int
	Policies         int
	// Create: how long creating each kind took; ClusterReady: from the
	// first create until every pod had an address and every endpoint
	// was in an EndpointSlice.
	Create       map[string]time.Duration
	ClusterReady time.Duration
	Cold         *phase
	Churn        *churn
	APIRestart   *apiRestart
	Restart      *phase
	// Conns: per phase, the real pods' connections.
	Conns map[string]map[string]connStats
	// MapReads: the BPF map reads of the run and their mean time.
	MapReads  int
	MapReadMs float64
	Notes     []string
}

// phase is xlaned's cost in a phase.
type phase struct {
	Took time.Duration // to programmed (cold start), to its first full sync (restart)
	// CachesSynced: xlaned's informers' sync, from its log.
	CachesSynced string `json:",omitempty"`
	CPU          time.Duration
	PeakRSSMB    float64 // VmHWM
	RSSMB        float64 // VmRSS at the end
	// MapBytes: the pinned maps' memlock; TableBytes: the Maglev tables
	// (xlane status).
	MapBytes, TableBytes uint64
	Services, Backends   int // entries in the maps at the end
	Peers                int
	Lists                map[string]int // xlaned's relists in the phase
	// BackendsBefore, BackendsMin: the backend entries when the restart
	// began and the fewest any read saw during it (must not drop below
	// the first: pods still starting may add entries meanwhile, so the
	// count after is no bound).
	BackendsBefore int `json:",omitempty"`
	BackendsMin    int `json:",omitempty"`
}

type churn struct {
	Duration                                time.Duration
	PodStarts, PodStops, SvcChanges, NodeOp int
	APIErrors                               int
	Delays                                  map[string]*delays
	CPU                                     time.Duration
	RSSMB                                   float64
	Lists                                   map[string]int
}

type apiRestart struct {
	Down  time.Duration // from the stop to /readyz ok
	Lists map[string]int
	// From xlaned's log after the restart: full syncs, services it
	// wrote (created + updated + deleted), policy syncs.
	FullSyncs, ServiceWrites, PolicySyncs int
	// ChangeMs: a Service change after the restart, API -> map.
	ChangeMs float64
	CPU      time.Duration
}

func run(ctx context.Context, o options, tmp string, undo *harness.UndoStack) (*report, error) {
	rep := &report{RunHeader: harness.RunHeader{Started: time.Now(), NProc: runtime.NumCPU(), LoadStart: harness.LoadAvg(),
		Kernel: harness.KernelRelease(), CPU: harness.CPUModel(),
		Options: map[string]string{"nodes": fmt.Sprint(o.nodes), "pods-per-node": fmt.Sprint(o.podsPerNode), "services": fmt.Sprint(o.services),
			"policies": fmt.Sprint(o.policies), "churn": o.churn.String(), "pod-rate": fmt.Sprint(o.podRate), "svc-rate": fmt.Sprint(o.svcRate),
			"node-every": o.nodeEvery.String(), "poll": o.poll.String()}},
		Nodes: o.nodes, Pods: o.nodes * o.podsPerNode, Services: o.services, Policies: o.policies, Conns: map[string]map[string]connStats{}}
	if out, err := harness.Run(ctx, "git", "rev-parse", "--short", "HEAD"); err == nil {
		rep.GitCommit = strings.TrimSpace(out)
	}
	w, err := setup(ctx, o, tmp, undo)
	if err != nil {
		return nil, err
	}
	rep.K8sVersion, rep.Kwok = w.k8sVersion, filepath.Base(filepath.Dir(w.kwokBins))
	if w.view, err = newView(ctx, w.cp.CS); err != nil {
		return nil, err
	}
	if err := w.realNodes(ctx); err != nil {
		return nil, err
	}

	// The cluster, before xlaned.
	log.Printf("creating %d nodes, %d pods, %d Services, %d policies (%d API workers)", o.nodes, rep.Pods, o.services, o.policies, o.workers)
	w.plan = newPlan(o)
	t0 := time.Now()
	if rep.Create, err = w.plan.create(ctx, w.cp.CS); err != nil {
		return nil, err
	}
	for k, d := range rep.Create {
		log.Printf("  %s created in %.1f s", k, d.Seconds())
	}
	assigned := 0
	for _, k := range w.plan.podSvc {
		if k >= 0 {
			assigned++
		}
	}
	// Every pod with an address and in its Service's EndpointSlice; or
	// 99 % of them and no progress for 15 s: kwok 0.8 now and then gives
	// a pod a second address in a retried status patch, which the API
	// server refuses, and the pod stays Pending (noted).
	var last [2]int
	lastChange := time.Now()
	err = harness.WaitFor(ctx, "every pod with an address and in its EndpointSlice", time.Duration(rep.Pods)*20*time.Millisecond+2*time.Minute, w.kwok, func() bool {
		ips, eps := w.view.counts()
		if [2]int{ips, eps} != last {
			last, lastChange = [2]int{ips, eps}, time.Now()
		}
		return ips >= rep.Pods && eps >= assigned ||
			100*ips >= 99*rep.Pods && 100*eps >= 99*assigned && time.Since(lastChange) > 15*time.Second
	})
	if err != nil {
		return nil, fmt.Errorf("%w (%d pods of %d with an address, %d endpoints of %d in slices)", err, last[0], rep.Pods, last[1], assigned)
	}
	rep.ClusterReady = time.Since(t0)
	if last[0] < rep.Pods {
		rep.ClusterReady -= 15 * time.Second
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d of %d pods never got an address (kwok's retried status patch gave them two, refused by the API server); the run went on without them.", rep.Pods-last[0], rep.Pods))
	}
	log.Printf("cluster ready %.1f s after the first create", rep.ClusterReady.Seconds())

	// Cold start.
	if err := w.startXlaned(ctx, w.n2); err != nil {
		return nil, err
	}
	w.maps = newMapWatch(w.n1.pin, o.poll, w.view.seen)
	undo.Push("stop reading the maps", func(context.Context) error { w.maps.close(); return nil })
	if rep.Cold, err = w.coldStart(ctx); err != nil {
		return rep, err
	}
	if err := w.realPods(ctx); err != nil {
		return rep, err
	}
	w.maps.take()
	w.conns.take()

	// Churn.
	if o.churn > 0 {
		if rep.Churn, err = w.churn(ctx); err != nil {
			return rep, err
		}
		rep.Conns["churn"] = w.conns.take()
	}

	// kube-apiserver restart.
	if rep.APIRestart, err = w.restartAPIServer(ctx, rep.Cold.Lists); err != nil {
		return rep, err
	}
	rep.Conns["api-restart"] = w.conns.take()

	// xlaned restart at full size.
	if rep.Restart, err = w.restartXlaned(ctx); err != nil {
		return rep, err
	}
	rep.Conns["xlaned-restart"] = w.conns.take()
	rep.MapReads, _ = w.maps.readStats()
	_, mean := w.maps.readStats()
	rep.MapReadMs = float64(mean.Microseconds()) / 1000
	rep.LoadEnd = harness.LoadAvg()
	rep.Finished = time.Now()
	return rep, nil
}

// procStats reads a process's CPU time (user + system) and its RSS and
// peak RSS in MB.
func procStats(pid int) (cpu time.Duration, rss, peak float64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+2:])
			if len(f) > 12 {
				u, _ := strconv.ParseUint(f[11], 10, 64)
				k, _ := strconv.ParseUint(f[12], 10, 64)
				cpu = time.Duration(u+k) * 10 * time.Millisecond // USER_HZ 100
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmRSS:":
				rss = kb / 1024
			case "VmHWM:":
				peak = kb / 1024
			}
		}
	}
	return cpu, rss, peak
}

// finish fills p's process and map figures at the end of a phase.
func (w *world) finish(ctx context.Context, p *phase, cpu0 time.Duration) {
	cpu, rss, peak := procStats(w.n1.proc.Pid())
	p.CPU, p.RSSMB, p.PeakRSSMB = cpu-cpu0, rss, peak
	p.MapBytes, _ = mapMemory(w.n1.pin)
	if out, err := w.n1.xlane(ctx, w.bins, "-o", "json", "status"); err == nil {
		var st api.Status
		if json.Unmarshal([]byte(out), &st) == nil && st.Services != nil {
			p.TableBytes = st.Services.TableBytes
		}
	}
	if st := w.maps.state(); st != nil {
		p.Services, p.Backends, p.Peers = len(st.svcs), st.backends, peersLive(st)
	}
}

// peersLive counts the peers not marked gone.
func peersLive(s *mapState) int {
	n := 0
	for _, f := range s.peers {
		if f&bpf.PeerFlagGone == 0 {
			n++
		}
	}
	return n
}

// coldStart starts xlaned on xreal1 against the full cluster and times it
// to every Service, backend and node in its maps.
func (w *world) coldStart(ctx context.Context) (*phase, error) {
	svcs, backends := w.view.expected(1)
	log.Printf("cold start: xlaned --kubernetes against %d service keys, %d backends, %d nodes", svcs, backends, w.o.nodes+2)
	t0 := time.Now()
	if err := w.startXlaned(ctx, w.n1); err != nil {
		return nil, err
	}
	done, err := w.maps.wait(ctx, "the full cluster", 10*time.Minute, func(s *mapState) bool {
		return len(s.svcs) >= svcs && s.backends >= backends && peersLive(s) >= w.o.nodes+2
	})
	if err != nil {
		if st := w.maps.state(); st != nil {
			err = fmt.Errorf("%w (%d service keys of %d, %d backends of %d, %d peers of %d)", err, len(st.svcs), svcs, st.backends, backends, peersLive(st), w.o.nodes+2)
		}
		return nil, err
	}
	p := &phase{Took: done.Sub(w.n1.started)}
	w.finish(ctx, p, 0)
	p.CachesSynced = logValue(w.n1, "kubernetes: caches synced", "took")
	p.Lists, _ = countLists(w.auditLog, t0, time.Now())
	log.Printf("cold start: programmed %.2f s after the process start; CPU %.2f s, peak RSS %.0f MB, maps %.1f MB + tables %.1f MB; %d LISTs",
		p.Took.Seconds(), p.CPU.Seconds(), p.PeakRSSMB, float64(p.MapBytes)/1e6, float64(p.TableBytes)/1e6, sum(p.Lists))
	return p, nil
}

// logLines is xlaned's log lines with msg, each as its key=value pairs.
func logLines(n *realNode, msg string) []map[string]string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "xlaned.log"))
	var out []map[string]string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, `msg="`+msg+`"`) {
			continue
		}
		kv := map[string]string{}
		for _, m := range kvRE.FindAllStringSubmatch(l, -1) {
			kv[m[1]] = strings.Trim(m[2], `"`)
		}
		out = append(out, kv)
	}
	return out
}

var kvRE = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// logValue is key of the first log line with msg ("" if none).
func logValue(n *realNode, msg, key string) string {
	if ls := logLines(n, msg); len(ls) > 0 {
		return ls[0][key]
	}
	return ""
}

// livePod is a pod of the churn.
type livePod struct {
	ns, name, node string
	svc            int
}

// churn replaces pods, changes Services and replaces nodes for o.churn,
// each change timed to the maps.
func (w *world) churn(ctx context.Context) (*churn, error) {
	o := w.o
	r := rand.New(rand.NewPCG(1, 2))
	var pods []livePod
	for i, k := range w.plan.podSvc {
		if k >= 0 {
			pods = append(pods, livePod{ns: w.plan.svcNS(k), name: fmt.Sprintf("p%d", i), node: nodeName(i / o.podsPerNode), svc: k})
		}
	}
	var nodes []string
	slot := map[string]int{}
	for i := range o.nodes {
		nodes = append(nodes, nodeName(i))
		slot[nodeName(i)] = i + 2
	}
	nextSlot, nextPod := o.nodes+2, 0
	c := &churn{}
	var apiErrs atomic.Int64
	sem := make(chan struct{}, o.workers)
	var wg sync.WaitGroup
	async := func(f func() error) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(); err != nil && !apierrors.IsNotFound(err) {
				if apiErrs.Add(1) <= 3 {
					log.Printf("churn: %v", err)
				}
			}
		}()
	}
	cs := w.cp.CS
	stopPod := func(p livePod) {
		ip, ok := w.view.podIP(p.ns, p.name)
		t0 := time.Now()
		async(func() error { return cs.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{}) })
		if ok {
			w.maps.expect("pod-stop", t0, readyKey(ip.String(), false), readyKey(ip.String(), true), func(s *mapState) bool { return !s.hasBackend(ip) })
		}
		c.PodStops++
	}
	startPod := func(k int, node string) livePod {
		p := livePod{ns: w.plan.svcNS(k), name: fmt.Sprintf("c%d", nextPod), node: node, svc: k}
		nextPod++
		t0 := time.Now()
		w.view.whenIP(p.ns, p.name, func(ip netip.Addr) {
			w.maps.expect("pod-start", t0, readyKey(ip.String(), true), readyKey(ip.String(), false), func(s *mapState) bool { return s.hasBackend(ip) })
		})
		pod := podObject(p.name, p.ns, node, k)
		async(func() error { _, err := cs.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); return err })
		c.PodStarts++
		return p
	}
	extra := map[int]bool{} // Services with the second port now
	changeSvc := func(k int) {
		ns, name := w.plan.svcNS(k), svcName(k)
		add := !extra[k]
		extra[k] = add
		t0 := time.Now()
		async(func() error {
			return k8senv.Retry(ctx, func() error {
				s, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				vip := netip.AddrPortFrom(netip.MustParseAddr(s.Spec.ClusterIP), svcPort+1)
				if add {
					s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "extra", Protocol: corev1.ProtocolTCP, Port: svcPort + 1, TargetPort: intstr.FromString("http")})
				} else {
					s.Spec.Ports = slices.DeleteFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "extra" })
				}
				if _, err := cs.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
					return err
				}
				if add {
					w.maps.expect("svc-change", t0, portKey(ns, name, svcPort+1, true), portKey(ns, name, svcPort+1, false), func(s *mapState) bool { return s.hasService(vip) })
				} else {
					w.maps.expect("svc-change", t0, portKey(ns, name, svcPort+1, false), portKey(ns, name, svcPort+1, true), func(s *mapState) bool { return !s.hasService(vip) })
				}
				return nil
			})
		})
		c.SvcChanges++
	}
	replaceNode := func() {
		old := nodes[0]
		nodes = nodes[1:]
		oldCIDR := podCIDR(slot[old])
		var moved []int
		pods = slices.DeleteFunc(pods, func(p livePod) bool {
			if p.node == old {
				stopPod(p)
				moved = append(moved, p.svc)
				return true
			}
			return false
		})
		t0 := time.Now()
		async(func() error { return cs.CoreV1().Nodes().Delete(ctx, old, metav1.DeleteOptions{}) })
		w.maps.expect("node-change", t0, nodeKey(old, false), nodeKey(old, true), func(s *mapState) bool { return !s.hasPeer(oldCIDR) })
		name := fmt.Sprintf("kw-r%d", nextSlot)
		slot[name] = nextSlot
		cidr := podCIDR(nextSlot)
		node := nodeObject(name, nextSlot)
		nextSlot++
		t1 := time.Now()
		if err := createNode(ctx, cs, node); err != nil {
			apiErrs.Add(1)
			return
		}
		w.maps.expect("node-change", t1, nodeKey(name, true), nodeKey(name, false), func(s *mapState) bool { return s.hasPeer(cidr) })
		nodes = append(nodes, name)
		for _, k := range moved {
			pods = append(pods, startPod(k, name))
		}
		c.NodeOp++
	}

	cpu0, _, _ := procStats(w.n1.proc.Pid())
	t0 := time.Now()
	l0 := time.Now()
	log.Printf("churn: %v, %.0f pod replacements/s, %.0f Service changes/s, a node replaced every %v", o.churn, o.podRate, o.svcRate, o.nodeEvery)
	var podT, svcT, nodeT <-chan time.Time
	if o.podRate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.podRate))
		defer t.Stop()
		podT = t.C
	}
	if o.svcRate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.svcRate))
		defer t.Stop()
		svcT = t.C
	}
	if o.nodeEvery > 0 {
		t := time.NewTicker(o.nodeEvery)
		defer t.Stop()
		nodeT = t.C
	}
	end := time.After(o.churn)
loop:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-end:
			break loop
		case <-podT:
			i := r.IntN(len(pods))
			p := pods[i]
			stopPod(p)
			pods[i] = startPod(p.svc, nodes[r.IntN(len(nodes))])
		case <-svcT:
			changeSvc(r.IntN(o.services))
		case <-nodeT:
			if nextSlot < maxNodes+2 {
				replaceNode()
			}
		}
	}
	c.Duration = time.Since(t0)
	wg.Wait()
	// The last pods' addresses, which register their expectations.
	harness.WaitFor(ctx, "the churn's last pods with an address", expectTimeout, nil, func() bool { return w.view.pendingIPs() == 0 })
	if err := w.maps.settle(ctx); err != nil {
		return nil, err
	}
	cpu, rss, _ := procStats(w.n1.proc.Pid())
	c.CPU, c.RSSMB = cpu-cpu0, rss
	c.APIErrors = int(apiErrs.Load())
	c.Delays = w.maps.take()
	c.Lists, _ = countLists(w.auditLog, l0, time.Now())
	for _, k := range slices.Sorted(maps.Keys(c.Delays)) {
		d := c.Delays[k]
		log.Printf("churn %-12s %5d seen: p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%d lost, %d ambiguous); xlaned's part p50 %6.1f ms  p99 %6.1f ms  max %6.1f ms (%d unseen)",
			k, len(d.Ms), percentile(d.Ms, 50), percentile(d.Ms, 99), maxOf(d.Ms), d.Lost, d.Ambiguous,
			percentile(d.XlanedMs, 50), percentile(d.XlanedMs, 99), maxOf(d.XlanedMs), d.Unseen)
	}
	log.Printf("churn: %d pod starts, %d stops, %d Service changes, %d nodes replaced in %.1f s; xlaned CPU %.1f s (%.0f %% of a core), RSS %.0f MB",
		c.PodStarts, c.PodStops, c.SvcChanges, c.NodeOp, c.Duration.Seconds(), c.CPU.Seconds(), 100*c.CPU.Seconds()/c.Duration.Seconds(), c.RSSMB)
	return c, nil
}

// restartAPIServer restarts kube-apiserver (etcd stays) and counts what
// xlaned did about it; relists is what xlaned listed at its cold start.
func (w *world) restartAPIServer(ctx context.Context, relists map[string]int) (*apiRestart, error) {
	before := len(logLines(w.n1, "kubernetes sync"))
	policiesBefore := len(logLines(w.n1, "kubernetes policy sync"))
	cpu0, _, _ := procStats(w.n1.proc.Pid())
	t0 := time.Now()
	log.Printf("restarting kube-apiserver")
	down, err := w.cp.RestartAPIServer(ctx)
	if err != nil {
		return nil, err
	}
	a := &apiRestart{Down: down}
	// The watches come back (client-go's backoff is up to ~30 s after a
	// refused connection): until each informer has relisted as at the
	// cold start (relists), 20 s at most; then a change must get through.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		got, _ := countLists(w.auditLog, t0, time.Now())
		all := len(relists) > 0
		for res, n := range relists {
			all = all && got[res] >= n
		}
		if all {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	k := w.o.services / 2
	ns, name := w.plan.svcNS(k), svcName(k)
	s, err := w.cp.CS.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	vip := netip.AddrPortFrom(netip.MustParseAddr(s.Spec.ClusterIP), svcPort+2)
	s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "after-restart", Protocol: corev1.ProtocolTCP, Port: svcPort + 2, TargetPort: intstr.FromString("http")})
	t1 := time.Now()
	if _, err := w.cp.CS.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	seen, err := w.maps.wait(ctx, "a Service change after the API server restart", time.Minute, func(s *mapState) bool { return s.hasService(vip) })
	if err != nil {
		return nil, err
	}
	a.ChangeMs = float64(seen.Sub(t1).Microseconds()) / 1000
	cpu, _, _ := procStats(w.n1.proc.Pid())
	a.CPU = cpu - cpu0
	a.Lists, _ = countLists(w.auditLog, t0, time.Now())
	syncs := logLines(w.n1, "kubernetes sync")[before:]
	for _, l := range syncs {
		if _, full := l["k8s_services"]; full {
			a.FullSyncs++
		}
		for _, f := range []string{"created", "updated", "deleted"} {
			n, _ := strconv.Atoi(l[f])
			a.ServiceWrites += n
		}
	}
	a.PolicySyncs = len(logLines(w.n1, "kubernetes policy sync")) - policiesBefore
	log.Printf("kube-apiserver restart: down %.1f s; xlaned relisted %v; %d full syncs, %d service writes, %d policy syncs; a change after it %.1f ms",
		a.Down.Seconds(), a.Lists, a.FullSyncs, a.ServiceWrites, a.PolicySyncs, a.ChangeMs)
	return a, nil
}

// restartXlaned stops xlaned at full size and starts it again (it adopts
// its pins): until its first full sync, with the maps read throughout.
func (w *world) restartXlaned(ctx context.Context) (*phase, error) {
	before := w.maps.state()
	log.Printf("restarting xlaned at full size (%d service keys, %d backends)", len(before.svcs), before.backends)
	t0 := time.Now()
	if err := w.n1.proc.Stop(ctx); err != nil {
		return nil, err
	}
	// The first run's log kept beside (-keep-tmp), the restart's new.
	logf := filepath.Join(w.n1.dir, "xlaned.log")
	if err := os.Rename(logf, logf+".before-restart"); err != nil {
		return nil, err
	}
	minB := before.backends
	stopMin := make(chan struct{})
	minDone := make(chan struct{})
	go func() {
		defer close(minDone)
		for {
			if st := w.maps.state(); st != nil && st.backends < minB {
				minB = st.backends
			}
			select {
			case <-stopMin:
				return
			case <-time.After(w.o.poll):
			}
		}
	}()
	err := w.startXlaned(ctx, w.n1)
	if err == nil {
		err = harness.WaitFor(ctx, "xlaned's first Kubernetes sync after its restart", 10*time.Minute, w.n1.proc, func() bool {
			for _, l := range logLines(w.n1, "kubernetes sync") {
				if _, full := l["k8s_services"]; full {
					return true
				}
			}
			return false
		})
	}
	// One more read after the sync.
	time.Sleep(2 * w.o.poll)
	close(stopMin)
	<-minDone
	if err != nil {
		return nil, err
	}
	p := &phase{Took: time.Since(w.n1.started), BackendsBefore: before.backends, BackendsMin: minB}
	w.finish(ctx, p, 0)
	p.CachesSynced = logValue(w.n1, "kubernetes: caches synced", "took")
	p.Lists, _ = countLists(w.auditLog, t0, time.Now())
	log.Printf("xlaned restart: synced %.2f s after its start (caches %s); CPU %.2f s, peak RSS %.0f MB; backends %d before, %d at least during, %d after",
		p.Took.Seconds(), p.CachesSynced, p.CPU.Seconds(), p.PeakRSSMB, before.backends, minB, p.Backends)
	return p, nil
}
