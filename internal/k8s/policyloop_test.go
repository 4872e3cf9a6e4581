package k8s

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// slowPolicies is a recorder whose policy applies after the first wait
// until released: a policy sync of a large cluster.
type slowPolicies struct {
	recorder
	release chan struct{}
	calls   chan struct{}
}

func (s *slowPolicies) ApplyFirewallOwned(prefix string, owned []rules.Rule) error {
	s.mu.Lock()
	n := len(s.policies)
	s.mu.Unlock()
	if n > 0 {
		s.calls <- struct{}{}
		<-s.release
	}
	return s.recorder.ApplyFirewallOwned(prefix, owned)
}

// TestServiceChangeNotBehindPolicySync: a policy sync in progress (under
// pod churn one runs after another, each translating every pod) does not
// hold up a Service's change: the EndpointSlice update reaches the
// daemon while the policy apply has not returned (bench/scale, issue 32:
// the Service changes waited behind the policies' syncs). The pods'
// changes that came during it are applied by one more policy sync.
func TestServiceChangeNotBehindPolicySync(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.78.1"}}}}
	cs := fake.NewClientset(node, svc("a"), slice("a", "a-1", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.1.2", "n1", "r"}))
	r := &slowPolicies{release: make(chan struct{}), calls: make(chan struct{}, 10)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer close(r.release)
	if err := run(ctx, Config{NodeName: "n1", Log: slog.New(slog.DiscardHandler)}, cs, r); err != nil {
		t.Fatal(err)
	}
	r.wait(t, 0)
	r.waitPolicies(t, 0)
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "x"}},
			Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.2.9"}}
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("p1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("a pod's start made no policy sync")
	}
	// The policy apply is blocked now: a Service change must get through.
	es := slice("a", "a-1", discoveryv1.AddressTypeIPv4, 8080, ep{"10.244.1.2", "n1", "r"}, ep{"10.244.1.4", "n1", "r"})
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if req := r.wait(t, 1); len(req.Services) != 1 {
		t.Errorf("slice update during a policy sync: %+v, want service a", req)
	}
	// A pod during the blocked sync: one more policy sync after it.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("p2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.release <- struct{}{}
	select {
	case <-r.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("the pod started during a policy sync made no policy sync after it")
	}
	r.release <- struct{}{}
}
