package lbipam

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

func pool(name string, cidrs ...string) model.LBPool {
	p := model.LBPool{Name: name}
	for _, c := range cidrs {
		p.CIDRs = append(p.CIDRs, netip.MustParsePrefix(c))
	}
	return p
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// lbSvc is a Service of type LoadBalancer created at t0+age seconds.
func lbSvc(name string, age int, fams ...corev1.IPFamily) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second)),
			Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilies: fams},
	}
}

func withStatus(s *corev1.Service, ips ...string) *corev1.Service {
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func results(rs []Result) string {
	var out []string
	for _, r := range rs {
		s := r.Key + "=" + fmt.Sprint(r.IPs)
		if r.Reason != "" {
			s += " " + r.Reason
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func TestAssign(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	other := "example.com/other"
	pools := []model.LBPool{pool("a", "198.51.100.0/30", "2001:db8::/127"), pool("b", "203.0.113.8/31")}
	for _, c := range []struct {
		name string
		svcs []*corev1.Service
		want string
	}{
		{"first free of each family, oldest first; not the network nor the broadcast address",
			[]*corev1.Service{lbSvc("y", 2), lbSvc("x", 1, v6, v4)},
			"default/x=[2001:db8:: 198.51.100.1]; default/y=[198.51.100.2]"},
		{"kept across a restart: the status is the record",
			[]*corev1.Service{withStatus(lbSvc("x", 1), "203.0.113.9"), lbSvc("y", 2)},
			"default/x=[203.0.113.9]; default/y=[198.51.100.1]"},
		{"exhausted: the /30 has two usable, the /31 two",
			[]*corev1.Service{lbSvc("a", 1), lbSvc("b", 2), lbSvc("c", 3), lbSvc("d", 4), lbSvc("e", 5)},
			"default/a=[198.51.100.1]; default/b=[198.51.100.2]; default/c=[203.0.113.8]; default/d=[203.0.113.9]; default/e=[] PoolExhausted"},
		{"requested address, free",
			[]*corev1.Service{func() *corev1.Service { s := lbSvc("x", 1); s.Spec.LoadBalancerIP = "203.0.113.9"; return s }()},
			"default/x=[203.0.113.9]"},
		{"requested address, taken by an older service",
			[]*corev1.Service{withStatus(lbSvc("old", 1), "198.51.100.1"),
				func() *corev1.Service { s := lbSvc("x", 2); s.Annotations[AnnotationIPs] = "198.51.100.1"; return s }()},
			"default/old=[198.51.100.1]; default/x=[] RequestedUnavailable"},
		{"requested address outside every pool",
			[]*corev1.Service{func() *corev1.Service { s := lbSvc("x", 1); s.Annotations[AnnotationIPs] = "192.0.2.1"; return s }()},
			"default/x=[] RequestedUnavailable"},
		{"a pool by annotation",
			[]*corev1.Service{func() *corev1.Service { s := lbSvc("x", 1); s.Annotations[AnnotationPool] = "b"; return s }()},
			"default/x=[203.0.113.8]"},
		{"another class: left alone, its address counted as used",
			[]*corev1.Service{withStatus(func() *corev1.Service { s := lbSvc("o", 1); s.Spec.LoadBalancerClass = &other; return s }(), "198.51.100.1"), lbSvc("x", 2)},
			"default/x=[198.51.100.2]"},
		{"a duplicate in the statuses stays with the older",
			[]*corev1.Service{withStatus(lbSvc("new", 2), "198.51.100.1"), withStatus(lbSvc("old", 1), "198.51.100.1")},
			"default/old=[198.51.100.1]; default/new=[198.51.100.2]"},
		{"no IPv6 pool for an IPv6 service",
			[]*corev1.Service{func() *corev1.Service { s := lbSvc("x", 1, v6); s.Annotations[AnnotationPool] = "b"; return s }()},
			"default/x=[] NoPool"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := results(Assign(pools, c.svcs)); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestKubernetesAllocator: the ConfigMap's pools land in the store, the
// elected allocator writes status.loadBalancer.ingress (dual-stack by
// ipFamilies) and its condition, a deleted Service's address goes to the
// next one, and exhaustion says so in the condition; a second allocator
// (a restart) hands out nothing twice.
func TestKubernetesAllocator(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: ConfigMap},
		Data: map[string]string{PoolsKey: `[{"name": "pub", "cidrs": ["198.51.100.0/30", "2001:db8::/127"]}]`}}
	a, b := lbSvc("a", 1, corev1.IPv4Protocol, corev1.IPv6Protocol), lbSvc("b", 2)
	cs := fake.NewClientset(cm, a, b)
	p := New(st)
	run := func(id string) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		go p.RunKubernetes(ctx, cs, KubeConfig{Identity: id, Log: discard(), LeaseDuration: 2 * time.Second})
		return cancel
	}
	stop := run("n1")
	defer func() { stop() }()
	wait := func(name string, want string) *corev1.Service {
		t.Helper()
		var got *corev1.Service
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			got, _ = cs.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
			if got != nil && fmt.Sprint(IngressIPs(got)) == want {
				return got
			}
		}
		t.Fatalf("service %s: ingress %v, want %s", name, IngressIPs(got), want)
		return nil
	}
	got := wait("a", "[198.51.100.1 2001:db8::]")
	if c := meta.FindStatusCondition(got.Status.Conditions, ConditionType); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("condition %+v, want %s True", c, ConditionType)
	}
	wait("b", "[198.51.100.2]")
	pools, _ := p.all()
	if len(pools) != 1 || pools[0].Name != "pub" {
		t.Errorf("store pools %+v, want the ConfigMap's", pools)
	}
	// Exhausted: the /30 has two usable addresses.
	c := lbSvc("c", 3)
	cs.CoreV1().Services("default").Create(context.Background(), c, metav1.CreateOptions{})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, _ := cs.CoreV1().Services("default").Get(context.Background(), "c", metav1.GetOptions{})
		if cond := meta.FindStatusCondition(got.Status.Conditions, ConditionType); cond != nil && cond.Reason == "PoolExhausted" && len(IngressIPs(got)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service c: %+v, want no address and a PoolExhausted condition", got.Status)
		}
	}
	// A restart: the new allocator reads the statuses, gives nothing twice.
	stop()
	stop = run("n2")
	time.Sleep(500 * time.Millisecond)
	wait("a", "[198.51.100.1 2001:db8::]")
	wait("b", "[198.51.100.2]")
	// Release: b's address goes to c.
	cs.CoreV1().Services("default").Delete(context.Background(), "b", metav1.DeleteOptions{})
	wait("c", "[198.51.100.2]")
	// A bad pool in the ConfigMap is refused whole; the pools stay.
	cm.Data[PoolsKey] = `[{"name": "pub", "cidrs": ["198.51.100.0/30"]}, {"name": "x", "cidrs": ["198.51.100.2/31"]}]`
	cs.CoreV1().ConfigMaps("kube-system").Update(context.Background(), cm, metav1.UpdateOptions{})
	time.Sleep(300 * time.Millisecond)
	if pools, _ := p.all(); len(pools) != 1 || len(pools[0].CIDRs) != 2 {
		t.Errorf("store pools %+v after an overlapping ConfigMap, want the old ones", pools)
	}
	if err := p.mirror(cm); err == nil || !strings.Contains(err.Error(), "pools[1].cidrs") {
		t.Errorf("mirror of overlapping pools: %v, want an error naming pools[1].cidrs", err)
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
