package main

// The topology: a control plane, two real nodes and the simulated rest.
//
//	cp: etcd + kube-apiserver 192.168.81.100:6443 (audit log of xlaned's
//	    lists), kube-controller-manager (EndpointSlices), kwok (the
//	    simulated nodes' kubelet)
//	 |
//	ul: br0 ------------------------------+
//	 |                                    |
//	node xreal1 (.1, 10.128.0.0/24)      node xreal2 (.2, 10.128.1.0/24)
//	xlaned --kubernetes (measured)        xlaned, nodes from `xlane node add`
//	pods c1 (client), b1, b2              pod r1
//
// The Service "real" (default namespace, no selector, an EndpointSlice
// written here) has b1, b2 and r1 behind its ClusterIP: c1's connections
// to it reach r1 over the overlay a third of the time; c1 also connects to
// r1 directly. The simulated nodes kw-0... have pod CIDRs 10.128.2.0/24 on
// and InternalIPs 172.16.0.2 on: xlaned programs a peer for each.

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/test/k8senv"
)

const (
	cpAddr      = "192.168.81.100"
	serviceCIDR = "10.96.0.0/16"
	realSvc     = "real"
)

// realNode is one of the two nodes with a real xlaned.
type realNode struct {
	name, netns, addr string
	slot              int // its pod CIDR: podCIDR(slot)
	dir, pin          string
	kube              bool // xlaned --kubernetes
	proc              *harness.Proc
	started           time.Time
}

// world is everything a run made.
type world struct {
	o          options
	tmp, bins  string
	runID      string
	undo       *harness.UndoStack
	cp         *k8senv.ControlPlane
	auditLog   string
	kcm, kwok  *harness.Proc
	n1, n2     *realNode
	view       *view
	plan       *plan
	maps       *mapWatch
	conns      *checker
	clientNS   string
	realVIP    netip.AddrPort
	k8sVersion string
	kwokBins   string
}

// kwokBins returns the directory holding kwok: XLANE_KWOK_BIN (checked)
// or what scripts/kwok-bins.sh prints (it builds kwok once per machine).
func kwokBins(ctx context.Context, root string) (string, error) {
	if dir := os.Getenv("XLANE_KWOK_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "kwok")); err != nil {
			return "", fmt.Errorf("XLANE_KWOK_BIN=%s: %w", dir, err)
		}
		return dir, nil
	}
	out, err := harness.Run(ctx, filepath.Join(root, "scripts", "kwok-bins.sh"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// repoRoot is the xlane module's directory.
func repoRoot(ctx context.Context) (string, error) {
	gomod, err := harness.Run(ctx, "go", "env", "GOMOD")
	gomod = strings.TrimSpace(gomod)
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run from inside the xlane module (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// setup builds the binaries, the namespaces and the control plane with
// the controller manager and kwok.
func setup(ctx context.Context, o options, tmp string, undo *harness.UndoStack) (*world, error) {
	w := &world{o: o, tmp: tmp, undo: undo}
	root, err := repoRoot(ctx)
	if err != nil {
		return nil, err
	}
	k8sBins, err := k8senv.Bins(root, "kube-apiserver", "xlane-etcd", "kube-controller-manager")
	if err != nil {
		return nil, err
	}
	w.k8sVersion = filepath.Base(filepath.Dir(k8sBins))
	if w.kwokBins, err = kwokBins(ctx, root); err != nil {
		return nil, err
	}
	// XLANE_E2E_BIN: prebuilt xlaned and xlane (make's bin/, as the
	// end-to-end tests take them); else built into tmp.
	if w.bins = os.Getenv("XLANE_E2E_BIN"); w.bins != "" {
		w.runID = "xlbs-" + harness.RandomHex(3)
	} else {
		var runID string
		if w.bins, runID, err = harness.PrepareRun(ctx, tmp, "*"); err != nil {
			return nil, err
		}
		w.runID = strings.Replace(runID, "xlb-", "xlbs-", 1)
	}
	log.Printf("run %s: namespaces and pin dirs %s-*, xlaned and xlane from %s", w.runID, w.runID, w.bins)
	ul, cpNS := w.runID+"-ul", w.runID+"-cp"
	w.n1 = &realNode{name: "xreal1", netns: w.runID + "-n1", addr: "192.168.81.1", slot: 0, kube: true}
	w.n2 = &realNode{name: "xreal2", netns: w.runID + "-n2", addr: "192.168.81.2", slot: 1}
	for _, n := range []*realNode{w.n1, w.n2} {
		n.dir, n.pin = filepath.Join(tmp, n.name), filepath.Join("/sys/fs/bpf", n.netns)
	}
	w.clientNS = w.runID + "-c1"
	if err := harness.AddNamespaces(ctx, undo, ul, cpNS, w.n1.netns, w.n2.netns, w.clientNS,
		w.runID+"-b1", w.runID+"-b2", w.runID+"-r1"); err != nil {
		return nil, err
	}
	cmds := [][]string{{"ip", "-n", ul, "link", "add", "br0", "type", "bridge"}, {"ip", "-n", ul, "link", "set", "br0", "up"}}
	for _, n := range []struct{ ns, port, addr string }{{cpNS, "pcp", cpAddr}, {w.n1.netns, "pn1", w.n1.addr}, {w.n2.netns, "pn2", w.n2.addr}} {
		cmds = append(cmds,
			[]string{"ip", "-n", ul, "link", "add", n.port, "type", "veth", "peer", "name", "ul0", "netns", n.ns},
			[]string{"ip", "-n", ul, "link", "set", n.port, "master", "br0", "up"},
			[]string{"ip", "-n", n.ns, "addr", "add", n.addr + "/24", "dev", "ul0"},
			[]string{"ip", "-n", n.ns, "link", "set", "ul0", "up"})
	}
	if err := harness.RunAll(ctx, cmds...); err != nil {
		return nil, err
	}
	cpDir := filepath.Join(tmp, "cp")
	if err := os.MkdirAll(cpDir, 0o700); err != nil {
		return nil, err
	}
	audit, auditLog, err := auditArgs(cpDir)
	if err != nil {
		return nil, err
	}
	w.auditLog = auditLog
	log.Printf("control plane: etcd + kube-apiserver %s", w.k8sVersion)
	w.cp, err = k8senv.Start(ctx, k8senv.Options{Bins: k8sBins, Netns: cpNS, Addr: cpAddr, Dir: cpDir, ServiceCIDR: serviceCIDR,
		RBAC: filepath.Join(root, "deploy/kubernetes/rbac.yaml"), QPS: 2000,
		APIServerArgs: append(audit, "--service-node-port-range="+nodePortRange)})
	if err != nil {
		return nil, err
	}
	undo.Push("stop the control plane", func(context.Context) error {
		if o.keepTmp {
			os.WriteFile(filepath.Join(cpDir, "logs.txt"), []byte(w.cp.Logs(1<<20)), 0o600)
		}
		// Killed after 10 s of its graceful shutdown (thousands of
		// watches) is stopped all the same.
		if err := w.cp.Stop(); err != nil {
			log.Printf("control plane: %v", err)
		}
		return nil
	})
	// EndpointSlices only, with room for the churn: its default 20
	// requests a second would take minutes over the first slices.
	if w.kcm, err = w.start(ctx, "kube-controller-manager", cpNS, filepath.Join(k8sBins, "kube-controller-manager"),
		"--kubeconfig="+w.cp.Admin, "--leader-elect=false", "--secure-port=0", "--controllers=endpointslice-controller",
		"--kube-api-qps=1000", "--kube-api-burst=2000", "--concurrent-service-endpoint-syncs=20", "--v=1"); err != nil {
		return nil, err
	}
	// kwok's fast stages as scripts/kwok-bins.sh installs them: nodes
	// Ready at once (their status rewritten every 10 minutes, kwok's
	// heartbeat), pods Running with an address as soon as they exist,
	// deleted ones finished.
	stages, err := filepath.Glob(filepath.Join(w.kwokBins, "stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return nil, fmt.Errorf("no kwok stages in %s/stages (scripts/kwok-bins.sh installs them)", w.kwokBins)
	}
	// Its default of 4 pod stages at a time plays ~30 pods a second
	// here: 15,000 would take minutes. Each stage is a status patch
	// whose round trip is the API server's (~0.5 s at a load of 15):
	// 32 at a time played 61 pods a second, behind the 108 a second
	// the creates made (2026-11-30), so 128.
	conf := filepath.Join(tmp, "kwok.yaml")
	if err := os.WriteFile(conf, []byte(kwokConfig), 0o600); err != nil {
		return nil, err
	}
	if w.kwok, err = w.start(ctx, "kwok", cpNS, filepath.Join(w.kwokBins, "kwok"),
		"--kubeconfig="+w.cp.Admin, "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector="+kwokAnnotation+"=fake",
		"--node-ip="+cpAddr, "--config="+strings.Join(append(stages, conf), ",")); err != nil {
		return nil, err
	}
	return w, nil
}

const kwokConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 128
  nodePlayStageParallelism: 8
`

// start starts a process of the control plane with its log in tmp.
func (w *world) start(ctx context.Context, name, netns string, argv ...string) (*harness.Proc, error) {
	p, err := harness.StartProc(name, filepath.Join(w.tmp, name+".log"), harness.NSExec(netns, argv...)...)
	if err != nil {
		return nil, err
	}
	w.undo.Push("stop "+name, p.Stop)
	return p, nil
}

// realNodes creates the Node objects of the two real nodes (no kwok
// annotation: nothing plays their kubelet).
func (w *world) realNodes(ctx context.Context) error {
	for _, n := range []*realNode{w.n1, w.n2} {
		cidr := podCIDR(n.slot).String()
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.addr}}}}
		if err := createNode(ctx, w.cp.CS, node); err != nil {
			return err
		}
	}
	return nil
}

func (n *realNode) xlane(ctx context.Context, bins string, args ...string) (string, error) {
	return harness.Xlane(ctx, bins, n.dir, args...)
}

// startXlaned starts n's xlaned (adopting its pins after a stop).
func (w *world) startXlaned(ctx context.Context, n *realNode) error {
	args := []string{"--docker-plugin-socket=", "--uplink", "ul0", "--node-name", n.name, "--cluster-cidr", clusterCIDR}
	if n.kube {
		args = append(args, "--kubernetes", "--kubeconfig", w.cp.Kubeconfig)
	}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	n.started = time.Now()
	p, err := harness.StartXlaned(ctx, w.undo, harness.Xlaned{Name: "xlaned " + n.name, Netns: n.netns, Bins: w.bins, Dir: n.dir,
		PinDir: n.pin, Args: args, Timeout: 5 * time.Minute, Adopt: n.proc != nil})
	n.proc = p
	return err
}

// realPods makes the networks, the endpoints c1, b1, b2 (xreal1) and r1
// (xreal2), their servers and the Service "real"; once its ClusterIP is
// in xreal1's maps, the checker starts.
func (w *world) realPods(ctx context.Context) error {
	x2 := func(args ...string) error { _, err := w.n2.xlane(ctx, w.bins, args...); return err }
	for _, n := range []*realNode{w.n2, w.n1} {
		if err := x2("node", "add", n.name, "--underlay", n.addr, "--pod-cidr", podCIDR(n.slot).String()); err != nil {
			return err
		}
	}
	for _, n := range []*realNode{w.n1, w.n2} {
		err := harness.WaitFor(ctx, n.name+": xlane network create pods", time.Minute, n.proc, func() bool {
			_, err := n.xlane(ctx, w.bins, "network", "create", "pods", "--mode", "tc")
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	add := func(n *realNode, id string) (netip.Addr, error) {
		out, err := n.xlane(ctx, w.bins, "-o", "json", "endpoint", "add", "pods", "--netns", w.runID+"-"+id, "--id", id)
		if err != nil {
			return netip.Addr{}, err
		}
		ep, err := harness.ParseEndpoint(out)
		return ep.IPv4, err
	}
	if _, err := add(w.n1, "c1"); err != nil {
		return err
	}
	eps := map[string]netip.Addr{}
	for i, b := range []struct {
		n  *realNode
		id string
	}{{w.n1, "b1"}, {w.n1, "b2"}, {w.n2, "r1"}} {
		ip, err := add(b.n, b.id)
		if err != nil {
			return err
		}
		eps[b.id] = ip
		if err := serve(ctx, w.runID+"-"+b.id, ip, byte('1'+i)); err != nil {
			return err
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: realSvc},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: svcPort, TargetPort: intstr.FromInt(serverPort)}}}}
	got, err := w.cp.CS.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create service %s: %w", realSvc, err)
	}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: realSvc + "-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: realSvc, discoveryv1.LabelManagedBy: "xlane-bench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(serverPort))}}}
	for _, id := range []string{"b1", "b2", "r1"} {
		node := w.n1.name
		if id == "r1" {
			node = w.n2.name
		}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{eps[id].String()}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := w.cp.CS.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create endpointslice %s: %w", es.Name, err)
	}
	w.realVIP = netip.AddrPortFrom(netip.MustParseAddr(got.Spec.ClusterIP), svcPort)
	if _, err := w.maps.wait(ctx, "the ClusterIP of "+realSvc, time.Minute, func(s *mapState) bool {
		return s.hasService(w.realVIP) && s.hasBackend(eps["r1"])
	}); err != nil {
		return err
	}
	// Every path must work, steadily (100 connections in a row), before
	// it is watched: right after r1's creation one connection over the
	// overlay timed out now and then under load (2026-11-29).
	for what, tg := range w.targets(eps["r1"]) {
		inRow := 0
		err := harness.WaitFor(ctx, "c1 -> "+what+", 100 connections in a row", time.Minute, nil, func() bool {
			for inRow < 100 {
				if connectOnce(filepath.Join(harness.NetnsDir, w.clientNS), tg.addr, tg.want) != nil {
					inRow = 0
					return false
				}
				inRow++
				time.Sleep(connEvery)
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	w.conns = startChecker(w.clientNS, w.targets(eps["r1"]))
	w.undo.Push("stop the connection checker", func(context.Context) error { w.conns.stop(); return nil })
	return nil
}

// targets are what c1 connects to: the ClusterIP and r1 across the
// overlay.
func (w *world) targets(r1 netip.Addr) map[string]target {
	return map[string]target{
		"clusterip":       {addr: w.realVIP, want: []byte("123")},
		"pod-remote-node": {addr: netip.AddrPortFrom(r1, serverPort), want: []byte("3")},
	}
}
