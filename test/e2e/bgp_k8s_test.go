package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/internal/bgp"
	"github.com/xlane-dev/xlane/internal/lbipam"
	"github.com/xlane-dev/xlane/internal/model"
)

// bgpKubePeers is the Node annotation of TestBGPKubernetes's nodes: both
// sessions with the router.
const bgpKubePeers = `[{"address": "192.168.78.254", "asn": 65000, "hold_time": 9}, {"address": "fd00:78::254", "asn": 65000, "hold_time": 9}]`

// TestBGPKubernetes: Kubernetes mode with LoadBalancer address allocation
// and BGP, against a real kube-apiserver (deploy/kubernetes/rbac.yaml's
// identity) and a real FRR: the nodes' peers come from their Nodes'
// annotation xlane.dev/bgp-peers (a bad one is refused whole, a peer
// removed there ends its session, the CLI cannot remove one); a Service
// of type LoadBalancer with
// externalTrafficPolicy Local gets an address of the ConfigMap's pool in
// status.loadBalancer.ingress; only the nodes with a ready local endpoint
// announce it (ECMP when both have one); a client behind the router
// reaches it (SHA-256-checked TCP); the last local endpoint's removal
// withdraws a node's route, the Service's deletion the rest.
func TestBGPKubernetes(t *testing.T) {
	skipInMatrixGuest(t, "FRR is not in the guests")
	bins := k8sBins(t, "kube-apiserver", "xlane-etcd")
	ctx := context.Background()
	r := newBGPRackWith(t, 2, false, func(r *bgpRack) {
		cpNS := newNetns(t, "cp")
		run(t, "ip", "-n", r.tor, "link", "add", "pcp", "type", "veth", "peer", "name", "ul0", "netns", cpNS)
		run(t, "ip", "-n", r.tor, "link", "set", "pcp", "master", "br0", "up")
		runIn(t, cpNS, "ip", "addr", "add", "192.168.78.100/24", "dev", "ul0")
		runIn(t, cpNS, "ip", "link", "set", "ul0", "up")
		runIn(t, cpNS, "ip", "link", "set", "lo", "up")
		r.kube = startControlPlane(t, bins, cpNS, "192.168.78.100")
		for i := 1; i <= 2; i++ {
			n, err := r.kube.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i),
				Annotations: map[string]string{bgp.PeersAnnotation: bgpKubePeers}},
				Spec: corev1.NodeSpec{PodCIDRs: []string{fmt.Sprintf("10.245.%d.0/24", i), fmt.Sprintf("fd00:245:0:%d::/64", i)}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create node: %v", err)
			}
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.78.%d", i)},
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00:78::%d", i)}}
			if _, err := r.kube.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("node status: %v", err)
			}
		}
		_, err := r.kube.cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: lbipam.ConfigMap},
			Data:       map[string]string{lbipam.PoolsKey: `[{"name": "public", "cidrs": ["198.51.100.0/28"]}]`},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create the pools' ConfigMap: %v", err)
		}
	})
	r.waitEstablished(t)
	n1, n2 := r.nodes[0], r.nodes[1]
	cs := r.kube.cs
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt(9300)}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	var lb netip.Addr
	waitFor(t, 30*time.Second, "web: an address of the pool in status.loadBalancer.ingress", func() bool {
		got, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(got.Status.LoadBalancer.Ingress) == 0 {
			return false
		}
		lb = netip.MustParseAddr(got.Status.LoadBalancer.Ingress[0].IP)
		return true
	})
	if lb != netip.MustParseAddr("198.51.100.1") {
		t.Fatalf("web got %s, want 198.51.100.1 (the pool's first usable address)", lb)
	}
	slice := func(eps ...*bgpNode) {
		t.Helper()
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "xlane-e2e"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(9300))}},
		}
		for _, b := range eps {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{b.ep.IPs[0].String()}, NodeName: ptr.To(b.name),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		_, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{})
		if err != nil {
			_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("endpoint slice: %v", err)
		}
	}
	host := netip.PrefixFrom(lb, 32)
	slice(n1)
	took := r.frr.waitRoute(host, 15*time.Second, n1.under4.String())
	t.Logf("local endpoint on n1 → its route in the router's RIB in %s", took)
	exchangeVia(t, r.client, n1.pod, netip.AddrPortFrom(n1.ep.IPs[0], 9300), netip.AddrPortFrom(lb, 80), bulkSize(4<<20))
	slice(n1, n2)
	r.frr.waitRoute(host, 15*time.Second, n1.under4.String(), n2.under4.String())
	slice(n2)
	took = r.frr.waitRoute(host, 15*time.Second, n2.under4.String())
	t.Logf("n1's last local endpoint gone → n1's route withdrawn in %s", took)
	exchangeVia(t, r.client, n2.pod, netip.AddrPortFrom(n2.ep.IPs[0], 9300), netip.AddrPortFrom(lb, 80), bulkSize(4<<20))
	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took = r.frr.waitRoute(host, 15*time.Second)
	t.Logf("service deleted → withdrawn in %s", took)

	t.Run("peers from the node annotation", func(t *testing.T) {
		var peers []model.BGPPeer
		n1.mustXlane(&peers, "bgp", "peer", "ls")
		if len(peers) != 2 || peers[0].Source != bgp.SourceNodeAnnotation || peers[1].Source != bgp.SourceNodeAnnotation {
			t.Fatalf("n1's peers %+v, want the annotation's two", peers)
		}
		if _, stderr, err := n1.xlane("bgp", "peer", "rm", "fd00:78::254"); err == nil || !strings.Contains(stderr, "Node annotation") {
			t.Errorf("xlane bgp peer rm of an annotation's peer: %v %q, want refused naming the annotation", err, stderr)
		}
		annotate := func(v string) {
			t.Helper()
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, bgp.PeersAnnotation, v)
			if _, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatalf("annotate n1: %v", err)
			}
		}
		// A bad annotation is refused whole: the sessions stay.
		annotate(`[{"address": "192.168.78.254", "asn": 65000}, {"address": "fd00:78::254", "asn": 0}]`)
		waitFor(t, 15*time.Second, "n1 logs the refused annotation naming peers[1].asn", func() bool {
			return strings.Contains(n1.log.String(), "peers[1].asn")
		})
		n1.mustXlane(&peers, "bgp", "peer", "ls")
		if len(peers) != 2 || peers[1].HoldTime != 9 {
			t.Errorf("n1's peers after a refused annotation: %+v, want the two as they were", peers)
		}
		// The IPv6 peer left out: its session ends, its routes go.
		annotate(`[{"address": "192.168.78.254", "asn": 65000, "hold_time": 9}]`)
		took := r.frr.waitRoute(n1.pod6, 15*time.Second)
		t.Logf("peer removed from the annotation → its routes withdrawn in %s", took)
		n1.mustXlane(&peers, "bgp", "peer", "ls")
		if len(peers) != 1 || peers[0].Address.String() != "192.168.78.254" {
			t.Errorf("n1's peers %+v, want 192.168.78.254 alone", peers)
		}
		r.frr.waitRoute(n1.pod4, time.Second, n1.under4.String())
	})

	t.Run("allocator restart", func(t *testing.T) {
		// Every xlaned restarted (the allocator among them): the new
		// one reads the statuses and hands out no address twice.
		ingress := func(name string) string {
			var ip string
			waitFor(t, 45*time.Second, name+": an address in status.loadBalancer.ingress", func() bool {
				got, err := cs.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
				if err != nil || len(got.Status.LoadBalancer.Ingress) == 0 {
					return false
				}
				ip = got.Status.LoadBalancer.Ingress[0].IP
				return true
			})
			return ip
		}
		create := func(name string) {
			t.Helper()
			_, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
					Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt(9300)}}}},
				metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create service %s: %v", name, err)
			}
		}
		create("a")
		create("b")
		a, b := ingress("a"), ingress("b")
		if a == b {
			t.Fatalf("a and b both got %s", a)
		}
		for _, n := range r.nodes {
			n.stop(syscall.SIGTERM)
		}
		for _, n := range r.nodes {
			n.start()
		}
		create("c")
		c := ingress("c")
		if c == a || c == b {
			t.Errorf("c got %s after the restart, which a (%s) or b (%s) has", c, a, b)
		}
		if a2, b2 := ingress("a"), ingress("b"); a2 != a || b2 != b {
			t.Errorf("after the restart a has %s, b %s; want %s, %s as before", a2, b2, a, b)
		}
		t.Logf("a %s, b %s; after every xlaned's restart, c %s", a, b, c)
	})
}
