package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
)

// recorder is a Target that keeps every request.
type recorder struct {
	mu       sync.Mutex
	applies  []model.ServiceApply
	policies [][]rules.Rule
	nodes    [][]model.Node
}

func (r *recorder) SyncNodes(want []model.Node) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = append(r.nodes, want)
	return nil
}

func (r *recorder) ApplyServices(req model.ServiceApply) (*model.ServiceApplyResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applies = append(r.applies, req)
	return &model.ServiceApplyResult{}, nil
}

func (r *recorder) ApplyFirewallOwned(prefix string, owned []rules.Rule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policies = append(r.policies, owned)
	return nil
}

// wait returns the next apply after the first n.
func (r *recorder) wait(t *testing.T, n int) model.ServiceApply {
	t.Helper()
	return waitNth(t, r, &r.applies, n, "apply")
}

// waitPolicies returns the next policy apply after the first n.
func (r *recorder) waitPolicies(t *testing.T, n int) []rules.Rule {
	t.Helper()
	return waitNth(t, r, &r.policies, n, "policy apply")
}

// waitNth returns (*list)[n] once the recorder has it.
func waitNth[T any](t *testing.T, r *recorder, list *[]T, n int, what string) T {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		if len(*list) > n {
			v := (*list)[n]
			r.mu.Unlock()
			return v
		}
		r.mu.Unlock()
	}
	t.Fatalf("no %s after %d", what, n)
	var zero T
	return zero
}

// TestControllerIncremental: the first sync applies every Service with a
// prune; after it, a changed EndpointSlice or Service is applied alone (no
// prune, the other Services not listed), a deleted one by name; a change
// of this node's addresses (its NodePorts) is a full sync again.
func TestControllerIncremental(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.78.1"}}}}
	cs := fake.NewClientset(node,
		svc("a"), slice("a", "a-1", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.1.2", "n1", "r"}),
		svc("b", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.11", []string{"10.96.0.11"} }),
		slice("b", "b-1", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.1.3", "n1", "r"}))
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := run(ctx, Config{NodeName: "n1", Log: slog.New(slog.DiscardHandler)}, cs, r); err != nil {
		t.Fatal(err)
	}
	first := r.wait(t, 0)
	if !first.Prune || len(first.Services) != 2 {
		t.Fatalf("first sync: %+v, want both services and a prune", first)
	}

	// a's slice gets an endpoint: a alone.
	es := slice("a", "a-1", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.1.2", "n1", "r"}, ep{"10.244.1.4", "n1", "r"})
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	req := r.wait(t, 1)
	if req.Prune || len(req.Services) != 1 || req.Services[0].Name != "k8s.default.a.tcp80.c0" ||
		!slices.Equal(api.BackendSpecs(req.Services[0].Backends), []string{"10.244.1.2:8080@1", "10.244.1.4:8080@1"}) || len(req.Delete) != 0 {
		t.Errorf("slice update: %+v, want a alone with two backends", req)
	}

	// b deleted: its name deleted, nothing else.
	if err := cs.CoreV1().Services("default").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	req = r.wait(t, 2)
	if req.Prune || len(req.Services) != 0 || !slices.Equal(req.Delete, []string{"k8s.default.b.tcp80.c0"}) {
		t.Errorf("service delete: %+v, want b's name deleted", req)
	}

	// c created with a's ClusterIP, a VIP a has: a full sync decides.
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc("c"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	req = r.wait(t, 3)
	if !req.Prune || len(req.Services) != 1 || req.Services[0].Name != "k8s.default.a.tcp80.c0" {
		t.Errorf("a VIP claimed twice: %+v, want a full sync keeping a's", req)
	}

	// The node's address changes: every Service again (NodePorts).
	node.Status.Addresses[0].Address = "192.168.78.9"
	if _, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	req = r.wait(t, 4)
	if !req.Prune {
		t.Errorf("node address changed: %+v, want a full sync", req)
	}
}

// TestHealthCheckNodePort: a LoadBalancer Service with
// externalTrafficPolicy Local gets its health-check NodePort served (on
// loopback here): 200 and the count of this node's ready endpoints, 503
// without one, nothing once the Service is gone.
func TestHealthCheckNodePort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	lb := svc("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = port
	})
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, lb,
		slice("lb", "lb-1", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.1.2", "n1", "r"}, ep{"10.244.1.3", "n1", "r"},
			ep{"10.244.2.2", "n2", "r"}, ep{"10.244.1.4", "n1", "st"}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &recorder{}
	if err := runAt(ctx, Config{NodeName: "n1", Log: slog.New(slog.DiscardHandler)}, cs, c, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
	get := func() (int, map[string]any, error) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var body map[string]any
		err = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body, err
	}
	code, body, err := get()
	if err != nil || code != 200 || body["localEndpoints"] != float64(2) || fmt.Sprint(body["service"]) != "map[name:lb namespace:default]" {
		t.Errorf("health check: %d %v %v, want 200 and 2 local endpoints of default/lb", code, body, err)
	}
	// No ready endpoint on n1 left: 503.
	es := slice("lb", "lb-1", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.2.2", "n2", "r"})
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for code, body, err = get(); code != 503 && time.Now().Before(deadline); code, body, err = get() {
		time.Sleep(10 * time.Millisecond)
	}
	if code != 503 || body["localEndpoints"] != float64(0) {
		t.Errorf("health check without local endpoints: %d %v %v, want 503 and 0", code, body, err)
	}
	if err := cs.CoreV1().Services("default").Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, _, err = get(); err == nil && time.Now().Before(deadline); _, _, err = get() {
		time.Sleep(10 * time.Millisecond)
	}
	if err == nil {
		t.Errorf("health-check NodePort %d still served after its Service was deleted", port)
	}
}

func TestHealthCheckOf(t *testing.T) {
	for _, c := range []struct {
		name string
		svc  *corev1.Service
		ok   bool
	}{
		{"ClusterIP", svc("a"), false},
		{"LoadBalancer, Cluster", svc("a", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
		}), false},
		{"LoadBalancer, Local", svc("a", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), true},
	} {
		hc, ok := HealthCheckOf(c.svc, []*discoveryv1.EndpointSlice{slice("a", "a-1", discoveryv1.AddressTypeIPv4, 80,
			ep{"10.0.0.1", "n1", "r"}, ep{"10.0.0.2", "n1", "-"}, ep{"10.0.0.3", "n1", "rst"}, ep{"10.0.0.4", "n2", "r"})}, "n1")
		if ok != c.ok || ok && (hc.Port != 32000 || hc.Local != 2) {
			t.Errorf("%s: %+v %v, want ok %v and 2 local endpoints", c.name, hc, ok, c.ok)
		}
	}
}

// TestControllerPolicyRulesNameNoVIP: with a Service whose every
// backend an egress rule allows, the policy's rules name the pods and no
// ClusterIP (the datapath judges a flow to a VIP on the backend it picks,
// after the DNAT: a rule on the VIP would never match), and a change of
// the Service's EndpointSlice leaves the rules alone (no policy sync).
func TestControllerPolicyRulesNameNoVIP(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.78.1"}}}}
	objs := []runtime.Object{node,
		svc("websvc", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"} }),
		slice("websvc", "websvc-4", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.2.10", "n2", "r"}),
		netpol("team-a", "out", map[string]string{"app": "client"}, func(s *networkingv1.NetworkPolicySpec) {
			s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromString("http"))}}}
		})}
	for _, p := range policyPods() {
		objs = append(objs, p)
	}
	for _, n := range policyNamespaces() {
		objs = append(objs, n)
	}
	cs := fake.NewClientset(objs...)
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := run(ctx, Config{NodeName: "n1", Log: slog.New(slog.DiscardHandler)}, cs, r); err != nil {
		t.Fatal(err)
	}
	r.wait(t, 0)
	got := r.waitPolicies(t, 0)
	if len(got) == 0 {
		t.Fatal("no rules for the policy")
	}
	for _, rule := range got {
		if slices.Contains(rule.Dst, "10.96.0.10") {
			t.Errorf("rule %s names the ClusterIP 10.96.0.10: %+v", rule.Name, rule)
		}
	}
	if !slices.ContainsFunc(got, func(r rules.Rule) bool { return slices.Contains(r.Dst, "10.244.2.10") }) {
		t.Errorf("no rule allows the backend pod web (10.244.2.10):\n%s", ruleDump(got))
	}

	es := slice("websvc", "websvc-4", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.2.10", "n2", "r"}, ep{"10.244.2.20", "n2", "r"})
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.wait(t, 1)
	time.Sleep(100 * time.Millisecond)
	r.mu.Lock()
	n := len(r.policies)
	r.mu.Unlock()
	if n != 1 {
		t.Errorf("%d policy applies after an EndpointSlice change, want the first alone", n)
	}
}

// TestControllerWGPublicKey: with encryption, the controller publishes
// this node's WireGuard public key on its Node (the one annotation, by
// patch) and reads the peers' from theirs into their node records.
func TestControllerWGPublicKey(t *testing.T) {
	const own, peer = "LWAS+y79PYneHmll4wnF2ZF4Aa8QJfAPUHTix87UZ3c=", "YM3W+yDWap7cOCTJa/1PAephpf/EOv8zWph1iJ4Wm28="
	mk := func(name, addr, cidr string, ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
			Spec:   corev1.NodeSpec{PodCIDR: cidr},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}}}
	}
	cs := fake.NewClientset(mk("n1", "192.168.78.1", "10.244.1.0/24", map[string]string{"other": "kept"}),
		mk("n2", "192.168.78.2", "10.244.2.0/24", map[string]string{AnnotationWGPublicKey: peer}))
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := make(chan string, 1)
	if err := run(ctx, Config{NodeName: "n1", Nodes: true, WGPublicKey: own, WGKeys: keys, Log: slog.New(slog.DiscardHandler)}, cs, r); err != nil {
		t.Fatal(err)
	}
	recs := waitNth(t, r, &r.nodes, 0, "node sync")
	var got string
	for _, rec := range recs {
		if rec.Name == "n2" {
			got = rec.WGPublicKey
		}
	}
	if got != peer {
		t.Errorf("n2's record key %q, want %q (its annotation); records %+v", got, peer, recs)
	}
	waitKey := func(key string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Annotations[AnnotationWGPublicKey] == key {
				if n.Annotations["other"] != "kept" {
					t.Errorf("n1's other annotations: %v, want them kept", n.Annotations)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("n1's annotations %v: %s is not %s", n.Annotations, AnnotationWGPublicKey, key)
			}
		}
	}
	waitKey(own)
	// A rotation (xlane node rotate-key): the new key is published, with
	// no other event.
	const rotated = "hCq1VwXFcm4yXoV0mXn2Pp3l5vEW5m6yJ0fU3n1fGks="
	keys <- rotated
	waitKey(rotated)
}

// TestControllerClusterPolicy: before the API server serves the
// ClusterNetworkPolicy CRD the policies are not watched (and nothing
// fails); once it does, they are, their rules are applied with the
// NetworkPolicies', a policy with a bad field is left out, and each
// policy's status condition says which (the field named).
func TestControllerClusterPolicy(t *testing.T) {
	defer func(d time.Duration) { cnpRecheck = d }(cnpRecheck)
	cnpRecheck = 20 * time.Millisecond
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.78.1"}}}}
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}}
	nsd := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}}}
	cs := fake.NewClientset(node, web, nsd)
	toU := func(p *ClusterNetworkPolicy) *unstructured.Unstructured {
		p.APIVersion, p.Kind = CNPResource.GroupVersion().String(), "ClusterNetworkPolicy"
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	good := newCNP("deny-all", CNPTierAdmin, 1, nsSubject(defaultNS), []CNPRule{{Action: CNPDeny, From: []CNPPeer{nsPeer(anyNS)}}}, nil)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CNPResource: "ClusterNetworkPolicyList"}, toU(good))
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := runWith(ctx, Config{NodeName: "n1", Log: slog.New(slog.DiscardHandler)}, cs, dyn, r, ""); err != nil {
		t.Fatal(err)
	}
	if got := r.waitPolicies(t, 0); len(got) != 0 {
		t.Fatalf("CRD not served: rules %v", got)
	}
	// The CRD is installed.
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: CNPResource.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: CNPResource.Resource}}}}
	last := func() []rules.Rule {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.policies[len(r.policies)-1]
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(last()) == 0; time.Sleep(10 * time.Millisecond) {
	}
	if got := last(); len(got) != 1 || got[0].Name != "k8s.np.admin:deny-all.in0" || got[0].Action != "drop" || got[0].Priority != CNPAdminBase+CNPRuleSlots {
		t.Fatalf("after the CRD: %v, want deny-all's rule", got)
	}
	bad := newCNP("bad", CNPTierAdmin, 2, nsSubject(defaultNS), nil, []CNPRule{{Action: CNPDeny, To: []CNPPeer{{Networks: []string{"10.0.0.1/8"}}}}})
	if _, err := dyn.Resource(CNPResource).Create(ctx, toU(bad), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cond := func(name string) map[string]any {
		u, err := dyn.Resource(CNPResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == CNPConditionType {
				return m
			}
		}
		return nil
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && cond("bad") == nil; time.Sleep(10 * time.Millisecond) {
	}
	if c := cond("bad"); c == nil || c["status"] != "False" || c["message"] != `spec.egress[0].to[0].networks[0]: "10.0.0.1/8": want a CIDR without host bits (10.0.0.0/8, fd00::/8)` {
		t.Errorf("bad's condition: %v", c)
	}
	if c := cond("deny-all"); c == nil || c["status"] != "True" {
		t.Errorf("deny-all's condition: %v", c)
	}
	if got := last(); len(got) != 1 || got[0].Name != "k8s.np.admin:deny-all.in0" {
		t.Errorf("with bad: %v, want deny-all's rule alone", got)
	}
}
