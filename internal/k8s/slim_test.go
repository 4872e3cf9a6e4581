package k8s

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestControllerIgnoresNoopUpdates: a Node's heartbeat (its conditions
// rewritten) and a pod's readiness write (conditions, container
// statuses) change nothing the controller reads: no node sync and no
// policy sync follow them (bench/scale measured them as most of xlaned's
// work under kwok's heartbeats and churn). A pod's labels still do.
func TestControllerIgnoresNoopUpdates(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.78.1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}}
	objs := []runtime.Object{node, netpol("team-a", "in", map[string]string{"app": "client"}, func(*networkingv1.NetworkPolicySpec) {})}
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
	if err := run(ctx, Config{NodeName: "n1", Nodes: true, Log: slog.New(slog.DiscardHandler)}, cs, r); err != nil {
		t.Fatal(err)
	}
	r.waitPolicies(t, 0)
	counts := func() (nodes, policies int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.nodes), len(r.policies)
	}
	nodes0, policies0 := counts()

	// The heartbeat.
	n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(10 * time.Second))
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The readiness write of the pod the policy selects.
	p, err := cs.CoreV1().Pods("team-a").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Ready: true}}
	if _, err := cs.CoreV1().Pods("team-a").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if nodes, policies := counts(); nodes != nodes0 || policies != policies0 {
		t.Errorf("after a heartbeat and a readiness write: %d node syncs and %d policy syncs, want %d and %d (none more)",
			nodes, policies, nodes0, policies0)
	}

	// A label is read: a policy sync.
	p, err = cs.CoreV1().Pods("team-a").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{"app": "client", "v": "2"}
	if _, err := cs.CoreV1().Pods("team-a").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitPolicies(t, policies0)
}

// TestUnchanged: the same resourceVersion is a no-op whatever else
// differs (a relist hands the cached object over again); without one
// (the fake clientset's objects) only equal slimmed objects are.
func TestUnchanged(t *testing.T) {
	pod := func(rv, ip string, cond bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: rv},
			Status: corev1.PodStatus{PodIP: ip}}
		if cond {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		o, _ := slim(p)
		return o.(*corev1.Pod)
	}
	for _, c := range []struct {
		name     string
		old, new any
		want     bool
	}{
		{"same rv", pod("5", "10.0.0.1", false), pod("5", "10.0.0.1", false), true},
		{"condition only", pod("5", "10.0.0.1", false), pod("6", "10.0.0.1", true), true},
		{"address", pod("5", "", false), pod("6", "10.0.0.1", true), false},
		{"no rv, address", pod("", "", false), pod("", "10.0.0.1", false), false},
		{"service", &corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}, &corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}}, false},
	} {
		if got := unchanged(c.old, c.new); got != c.want {
			t.Errorf("%s: unchanged %v, want %v", c.name, got, c.want)
		}
	}
}
