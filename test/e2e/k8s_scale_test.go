package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/test/k8senv"
)

// TestKubernetesScale: 10,000 Services (two endpoints each) created
// through a real kube-apiserver before xlaned --kubernetes starts; all are
// programmed within the 10 s of the daemon answering, and one
// EndpointSlice change reaches the datapath's service within 2 s (logged:
// the target is 100 ms; 29-47 ms on a loaded machine), by an
// incremental sync of that Service alone. Creating the objects takes about two
// minutes here (128 s on a quiet machine); it runs in make test and make
// test-k8s alike. The creates are quadratic in kube-apiserver 1.34, not in
// the client (protobuf, 16 workers, QPS 5000, etcd without fsync): each
// Service's ClusterIP allocation (ipallocator createIPAddress) updates its
// metrics with Used() and Free(), which list every IPAddress object through
// a label selector, 55 % of the API server's CPU at ~4,000 Services
// (pprof, 2026-11-25); MultiCIDRServiceAllocator, which brings it, is locked
// on in 1.34 (--emulated-version=1.33 could turn it off: not adopted).
//
// So `make test` runs it with XLANE_K8S_SCALE=3000 (about 20 s of creates
// instead of two minutes or more, and the deadline scaled with N: 3 s),
// and `make test-k8s` and a plain go test with the 10,000 and 10 s;
// bench/k8s measures 10,000 against kube-proxy (docs/benchmarks.md).
func TestKubernetesScale(t *testing.T) {
	N := 10000
	if v := os.Getenv("XLANE_K8S_SCALE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("XLANE_K8S_SCALE=%q: want a number of Services >= 100", v)
		}
		N = n
	}
	// The 10 s for 10,000, scaled with N (at least 3 s).
	deadline := max(time.Duration(N)*time.Millisecond, 3*time.Second)
	bins := k8sBins(t, "kube-apiserver", "xlane-etcd")
	ul := newNetns(t, "ul")
	runIn(t, ul, "ip", "link", "add", "br0", "type", "bridge")
	runIn(t, ul, "ip", "link", "set", "br0", "up")
	attach := func(netns, port, addr string) {
		run(t, "ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", netns)
		run(t, "ip", "-n", ul, "link", "set", port, "master", "br0", "up")
		runIn(t, netns, "ip", "addr", "add", addr+"/24", "dev", "ul0")
		runIn(t, netns, "ip", "link", "set", "ul0", "up")
		runIn(t, netns, "ip", "link", "set", "lo", "up")
	}
	cpNS := newNetns(t, "cp")
	attach(cpNS, "pcp", "192.168.78.100")
	// 20,000 objects: at the clientset's default 200 requests/s that is
	// 100 s of waiting on the client's rate limiter alone.
	cp := startControlPlaneWith(t, bins, cpNS, "192.168.78.100", cpOptions{qps: 5000})
	ctx := context.Background()
	// The objects first, then xlaned: its first sync carries all of them.
	var wg sync.WaitGroup
	start := time.Now()
	jobs := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				name := fmt.Sprintf("s%d", i)
				err := k8senv.Retry(ctx, func() error {
					_, err := cp.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
						Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt(8080)}}}}, metav1.CreateOptions{})
					return err
				})
				if err != nil {
					t.Error(err)
					for range jobs { // the feeder must not block on a worker that gave up
					}
					return
				}
				err = k8senv.Retry(ctx, func() error {
					_, err := cp.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
						ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
						AddressType: discoveryv1.AddressTypeIPv4,
						Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))}},
						Endpoints: []discoveryv1.Endpoint{
							{Addresses: []string{fmt.Sprintf("10.244.%d.%d", 1+i/250, i%250+1)}, NodeName: ptr.To("n1")},
							{Addresses: []string{fmt.Sprintf("10.245.%d.%d", 1+i/250, i%250+1)}, NodeName: ptr.To("n2")}},
					}, metav1.CreateOptions{})
					return err
				})
				if err != nil {
					t.Error(err)
					for range jobs { // the feeder must not block on a worker that gave up
					}
					return
				}
			}
		}()
	}
	for i := 0; i < N; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("created %d services + slices in %v", N, time.Since(start))
	n := newNode(t, func(n *node) {
		attach(n.netns, "p1", "192.168.78.1")
		n.flags = append(n.flags, "--kubernetes", "--kubeconfig", cp.kubeconfig, "--node-name", "n1", "--cluster-cidr", "10.244.0.0/14")
	})
	st := time.Now()
	for {
		svcs, err := n.client().Services(ctx)
		if err == nil && len(svcs) >= N+1 {
			break
		}
		if time.Since(st) > deadline {
			t.Fatalf("%d of %d services programmed %v after xlaned answered", len(svcs), N+1, deadline)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d services (the API server's own too) programmed %v after xlaned answered", N+1, time.Since(st))
	// One change at a time: the middle Service's slice gets another endpoint.
	mid := fmt.Sprintf("s%d", N/2)
	var lat []time.Duration
	for k := 0; k < 5; k++ {
		es, _ := cp.cs.DiscoveryV1().EndpointSlices("default").Get(ctx, mid+"-1", metav1.GetOptions{})
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.246.0.%d", k+1)}})
		t0 := time.Now()
		if _, err := cp.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := netip.MustParseAddrPort(fmt.Sprintf("10.246.0.%d:8080", k+1))
		for {
			s, err := n.client().Service(ctx, "k8s.default."+mid+".tcp80.c0")
			found := false
			if err == nil {
				for _, b := range s.Backends {
					found = found || b.Addr == want
				}
			}
			if found {
				break
			}
			if time.Since(t0) > 2*time.Second {
				t.Fatalf("an EndpointSlice change not programmed after 2 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
	}
	t.Logf("one EndpointSlice change, from the update call to the service's new backend (5 tries): %v", lat)
	// The sync's log line follows its apply, so the last change can be
	// visible through the API before its line reaches n.log: wait for it.
	incremental, lines := 0, []string(nil)
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		incremental, lines = 0, nil
		for _, l := range strings.Split(n.log.String(), "\n") {
			if strings.Contains(l, "kubernetes sync") || strings.Contains(l, "caches synced") {
				lines = append(lines, l)
			}
			if strings.Contains(l, "kubernetes sync") && strings.Contains(l, "changed_k8s_services=1 ") {
				incremental++
			}
		}
		if incremental >= len(lat) || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range lines {
		t.Log(l)
	}
	// Each change is applied alone (internal/k8s: the changed Service's
	// translation and apply), not by a sync of all 10,000.
	if incremental < len(lat) {
		t.Errorf("%d incremental syncs of one Service logged, want one per change (%d)", incremental, len(lat))
	}
}
