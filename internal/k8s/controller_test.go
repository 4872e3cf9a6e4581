package k8s

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/firewall/spec"
)

// recorder is a Target that keeps every request.
type recorder struct {
	mu       sync.Mutex
	applies  []api.ServiceApply
	policies [][]spec.Rule
}

func (r *recorder) SyncNodes([]api.NodeAdd) error { return nil }

func (r *recorder) ApplyServices(req api.ServiceApply) (*api.ServiceApplyResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applies = append(r.applies, req)
	return &api.ServiceApplyResult{}, nil
}

func (r *recorder) ApplyFirewallOwned(prefix string, rules []spec.Rule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policies = append(r.policies, rules)
	return nil
}

// wait returns the next apply after the first n.
func (r *recorder) wait(t *testing.T, n int) api.ServiceApply {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		if len(r.applies) > n {
			req := r.applies[n]
			r.mu.Unlock()
			return req
		}
		r.mu.Unlock()
	}
	t.Fatalf("no apply after %d", n)
	return api.ServiceApply{}
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
		!slices.Equal(req.Services[0].Backends, []string{"10.244.1.2:8080@1", "10.244.1.4:8080@1"}) || len(req.Delete) != 0 {
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
