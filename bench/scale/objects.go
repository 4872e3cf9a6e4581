package main

// The simulated cluster's objects: kwok nodes with pod CIDRs and
// InternalIPs, pods bound to them (kwok makes them Running with an address
// of their node's pod CIDR), Services selecting them (the controller
// manager writes the EndpointSlices), NetworkPolicies.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/test/k8senv"
)

const (
	// clusterCIDR holds every node's /24: the two real nodes' first
	// (10.128.0.0/24, 10.128.1.0/24), then the simulated ones'.
	clusterCIDR = "10.128.0.0/11"
	maxNodes    = 8000 // /24s of clusterCIDR, replacements included
	// kwokAnnotation marks the nodes kwok plays the kubelet of.
	kwokAnnotation = "kwok.x-k8s.io/node"
	maxEndpoints   = 50
	svcPort        = 80
	nodePortRange  = "30000-45000"
	lbClass        = "bench.xlane.dev/external"
)

var (
	clusterPrefix = netip.MustParsePrefix(clusterCIDR)
	kwokUnderlay  = netip.MustParseAddr("172.16.0.0") // node i: + i + 1
	lbBase        = netip.MustParseAddr("100.64.0.0") // Service k's LoadBalancer IP: + k + 1
)

// podCIDR is the /24 of node slot i (0 and 1: the real nodes).
func podCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(addN(clusterPrefix.Addr(), i*256), 24)
}

func addN(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// svcType of Service k: 60 % ClusterIP, 20 % NodePort, 20 % LoadBalancer.
func svcType(k int) corev1.ServiceType {
	switch k % 10 {
	case 6, 7:
		return corev1.ServiceTypeNodePort
	case 8, 9:
		return corev1.ServiceTypeLoadBalancer
	}
	return corev1.ServiceTypeClusterIP
}

// plan is the cluster to create: which Service each pod belongs to.
type plan struct {
	o      options
	ns     []string
	podSvc []int // pod i -> its Service (-1: none)
	sizes  []int // Service k -> its pods
}

// newPlan spreads the pods over the Services: one each, then the rest to
// Services drawn with a skew (k = S·u²: the first Services get the most),
// at most maxEndpoints each; pods beyond every Service's maximum belong to
// none.
func newPlan(o options) *plan {
	p := &plan{o: o, sizes: make([]int, o.services)}
	for n := range o.namespaces {
		p.ns = append(p.ns, fmt.Sprintf("scale-%d", n))
	}
	pods := o.nodes * o.podsPerNode
	r := rand.New(rand.NewPCG(32, 32))
	var order []int // Service of each assigned pod, in draw order
	for k := range o.services {
		p.sizes[k] = 1
		order = append(order, k)
	}
	full := 0
	for len(order) < pods && full < o.services {
		u := r.Float64()
		k := int(float64(o.services) * u * u)
		for p.sizes[k] >= maxEndpoints {
			k = (k + 1) % o.services
		}
		p.sizes[k]++
		if p.sizes[k] == maxEndpoints {
			full++
		}
		order = append(order, k)
	}
	p.podSvc = make([]int, pods)
	for i := range p.podSvc {
		p.podSvc[i] = -1
	}
	for i, j := range r.Perm(pods)[:len(order)] {
		p.podSvc[j] = order[i]
	}
	return p
}

func (p *plan) svcNS(k int) string { return p.ns[k%len(p.ns)] }
func svcName(k int) string         { return fmt.Sprintf("s%d", k) }
func nodeName(i int) string        { return fmt.Sprintf("kw-%d", i) }

// podObject is pod name on node, of Service k (-1: none) in namespace ns.
func podObject(name, ns, node string, k int) *corev1.Pod {
	app := "none"
	if k >= 0 {
		app = svcName(k)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{"app": app, "tier": fmt.Sprintf("t%d", max(k, 0)%5)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: serverPort}}}}}}
}

// nodeObject is simulated node slot i (a kwok node).
func nodeObject(name string, slot int) *corev1.Node {
	cidr := podCIDR(slot).String()
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{kwokAnnotation: "fake"},
		Labels: map[string]string{"type": "kwok"}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
		// Both kinds of address: kwok's node-initialize stage writes
		// the addresses when one is missing.
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addN(kwokUnderlay, slot).String()},
			{Type: corev1.NodeHostName, Address: name}}}}
}

// createNode creates a Node with its status (addresses), which a create
// may not keep.
func createNode(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) error {
	var got *corev1.Node
	if err := k8senv.Retry(ctx, func() (err error) {
		got, err = cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	if got != nil && len(got.Status.Addresses) > 0 {
		return nil
	}
	if got == nil || got.Name == "" { // a retry found it created
		var err error
		if got, err = cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			return err
		}
	}
	got.Status.Addresses = n.Status.Addresses
	_, err := cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
	return err
}

// parallel runs f(0..n-1) on workers goroutines; the first error stops it.
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					errs[w] = err
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// create makes the namespaces, nodes, Services (with their LoadBalancer
// IPs), pods and policies of the plan; it returns how long each kind
// took.
func (p *plan) create(ctx context.Context, cs kubernetes.Interface) (map[string]time.Duration, error) {
	took := map[string]time.Duration{}
	step := func(what string, n int, f func(i int) error) error {
		t0 := time.Now()
		if err := parallel(ctx, p.o.workers, n, f); err != nil {
			return fmt.Errorf("create %s: %w", what, err)
		}
		took[what] = time.Since(t0)
		return nil
	}
	err := step("namespaces", len(p.ns), func(i int) error {
		return k8senv.Retry(ctx, func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns[i],
				Labels: map[string]string{"team": fmt.Sprintf("t%d", i%5)}}}, metav1.CreateOptions{})
			return err
		})
	})
	if err != nil {
		return took, err
	}
	if err := step("nodes", p.o.nodes, func(i int) error {
		return createNode(ctx, cs, nodeObject(nodeName(i), i+2))
	}); err != nil {
		return took, err
	}
	if err := step("services", p.o.services, func(k int) error { return createService(ctx, cs, p.svcNS(k), k) }); err != nil {
		return took, err
	}
	if err := step("pods", len(p.podSvc), func(i int) error {
		k := p.podSvc[i]
		ns := p.ns[i%len(p.ns)]
		if k >= 0 {
			ns = p.svcNS(k)
		}
		pod := podObject(fmt.Sprintf("p%d", i), ns, nodeName(i/p.o.podsPerNode), k)
		return k8senv.Retry(ctx, func() error {
			_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		})
	}); err != nil {
		return took, err
	}
	err = step("policies", p.o.policies, func(m int) error {
		pol := policyObject(p.svcNS(m%p.o.services), m)
		return k8senv.Retry(ctx, func() error {
			_, err := cs.NetworkingV1().NetworkPolicies(pol.Namespace).Create(ctx, pol, metav1.CreateOptions{})
			return err
		})
	})
	return took, err
}

// createService creates Service k (port svcPort to the pods' http) and,
// for a LoadBalancer, its ingress IP.
func createService(ctx context.Context, cs kubernetes.Interface, ns string, k int) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName(k), Namespace: ns},
		Spec: corev1.ServiceSpec{Type: svcType(k), Selector: map[string]string{"app": svcName(k)},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: svcPort, TargetPort: intstr.FromString("http")}}}}
	if svcType(k) == corev1.ServiceTypeLoadBalancer {
		// An external load balancer's (a cloud's), which writes the
		// ingress IP here: xlaned's own allocator (internal/lbipam)
		// serves the classless ones and would clear it.
		svc.Spec.LoadBalancerClass = ptr.To(lbClass)
	}
	var got *corev1.Service
	if err := k8senv.Retry(ctx, func() (err error) {
		got, err = cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	if svcType(k) != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	return k8senv.Retry(ctx, func() error {
		if got == nil || got.Name == "" { // a retry found it created, or the last update failed
			var err error
			if got, err = cs.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		got.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addN(lbBase, k+1).String()}}
		_, err := cs.CoreV1().Services(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			got = nil
		}
		return err
	})
}

// policyObject is NetworkPolicy m in ns: Service m's pods (m modulo the
// Services) take TCP 8080 from the pods of one tier in the namespaces of
// one team.
func policyObject(ns string, m int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("np%d", m), Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": svcName(m)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", m%5)}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"tier": fmt.Sprintf("t%d", (m+1)%5)}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt(serverPort))}}}}}}
}

// view is the bench's own informers: the pods (their addresses, as kwok
// gives them) and the EndpointSlices (to know the controller manager has
// caught up), with what a phase waits on.
type view struct {
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	slices  cache.SharedIndexInformer
	svcs    cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer

	seen *seenLog // when the changes came out of the API server (seen.go)

	mu      sync.Mutex
	onIP    map[string]func(netip.Addr) // pod namespace/name -> called once it has an address
	stopped chan struct{}
}

func newView(ctx context.Context, cs kubernetes.Interface) (*view, error) {
	// Only what the bench reads: no managed fields, no pod spec.
	strip := func(obj any) (any, error) {
		if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
			m.GetObjectMeta().SetManagedFields(nil)
		}
		if p, ok := obj.(*corev1.Pod); ok {
			p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName}
			p.Status = corev1.PodStatus{PodIP: p.Status.PodIP, Phase: p.Status.Phase}
		}
		return obj, nil
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(strip))
	v := &view{factory: f, pods: f.Core().V1().Pods().Informer(), slices: f.Discovery().V1().EndpointSlices().Informer(),
		svcs: f.Core().V1().Services().Informer(), nodes: f.Core().V1().Nodes().Informer(),
		onIP: map[string]func(netip.Addr){}, stopped: make(chan struct{}), seen: &seenLog{at: map[string]time.Time{}}}
	if err := v.watchSeen(); err != nil {
		return nil, err
	}
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Status.PodIP == "" {
			return
		}
		key := p.Namespace + "/" + p.Name
		v.mu.Lock()
		fn := v.onIP[key]
		delete(v.onIP, key)
		v.mu.Unlock()
		if fn != nil {
			if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
				fn(a)
			}
		}
	}
	if _, err := v.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, n any) { seen(n) }}); err != nil {
		return nil, err
	}
	f.Start(v.stopped)
	go func() { <-ctx.Done(); v.stop() }()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("bench informer %v did not sync", typ)
		}
	}
	return v, nil
}

func (v *view) stop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.stopped:
	default:
		close(v.stopped)
	}
}

// whenIP calls fn with the pod's address once it has one.
func (v *view) whenIP(ns, name string, fn func(netip.Addr)) {
	v.mu.Lock()
	v.onIP[ns+"/"+name] = fn
	v.mu.Unlock()
	if obj, ok, _ := v.pods.GetStore().GetByKey(ns + "/" + name); ok {
		if p := obj.(*corev1.Pod); p.Status.PodIP != "" {
			v.mu.Lock()
			fn, had := v.onIP[ns+"/"+name]
			delete(v.onIP, ns+"/"+name)
			v.mu.Unlock()
			if had {
				fn(netip.MustParseAddr(p.Status.PodIP))
			}
		}
	}
}

// pendingIPs is how many whenIP calls wait.
func (v *view) pendingIPs() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.onIP)
}

// podIP is a pod's address in the bench's cache.
func (v *view) podIP(ns, name string) (netip.Addr, bool) {
	obj, ok, _ := v.pods.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(obj.(*corev1.Pod).Status.PodIP)
	return a, err == nil
}

// counts is how many pods have an address and how many ready endpoints
// the EndpointSlices of the Services list.
func (v *view) counts() (withIP, endpoints int) {
	for _, obj := range v.pods.GetStore().List() {
		if obj.(*corev1.Pod).Status.PodIP != "" {
			withIP++
		}
	}
	for _, obj := range v.slices.GetStore().List() {
		for _, e := range obj.(*discoveryv1.EndpointSlice).Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) {
				endpoints++
			}
		}
	}
	return withIP, endpoints
}

// expected is what xlaned should program for the Services in the
// bench's cache, node is xlaned's node's InternalIP count (its NodePort
// VIPs): service keys (VIP, port) and backend entries (each VIP's ready
// endpoints).
func (v *view) expected(nodeAddrs int) (svcs, backends int) {
	ready := map[string]int{}
	for _, obj := range v.slices.GetStore().List() {
		s := obj.(*discoveryv1.EndpointSlice)
		name := s.Labels[discoveryv1.LabelServiceName]
		seen := map[string]bool{}
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) && len(e.Addresses) > 0 && !seen[e.Addresses[0]] {
				seen[e.Addresses[0]] = true
				ready[s.Namespace+"/"+name]++
			}
		}
	}
	for _, obj := range v.svcs.GetStore().List() {
		s := obj.(*corev1.Service)
		vips := len(s.Spec.ClusterIPs)
		if s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			vips += nodeAddrs
		}
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			vips += len(s.Status.LoadBalancer.Ingress)
		}
		vips *= len(s.Spec.Ports)
		svcs += vips
		backends += vips * ready[s.Namespace+"/"+s.Name]
	}
	return svcs, backends
}
