package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestKubernetes: xlaned's Kubernetes mode against a real kube-apiserver
// (built from k8s.io/kubernetes by scripts/k8s-bins.sh, on an embedded
// etcd). Two nodes, each a namespace with xlaned --kubernetes, learn each
// other from the Node objects; Services and EndpointSlices created with
// client-go become xlane services; traffic from pods (namespaces with
// endpoints) and from a host outside the nodes reaches the backends.
//
//	client  pod1          pod2
//	    \    |             |
//	     node1 (n1)      node2 (n2)     xlaned --kubernetes --node-name nI
//	      | ul0            | ul0        192.168.78.I/24
//	      +------ br0 -----+---- ext (192.168.78.50)
//	              |
//	             cp: etcd + kube-apiserver (192.168.78.100:6443)
func TestKubernetes(t *testing.T) {
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
	ext := newNetns(t, "ext")
	attach(ext, "pext", "192.168.78.50")
	cp := startControlPlane(t, bins, cpNS, "192.168.78.100")
	ctx := context.Background()

	// The Node objects, as kubelets and the node IPAM controller would
	// leave them: an InternalIP and a pod CIDR each.
	type k8sNode struct {
		*node
		name  string
		addr  netip.Addr
		pod   string
		podIP netip.Addr
	}
	var nodes []*k8sNode
	for i := 1; i <= 2; i++ {
		k := &k8sNode{name: fmt.Sprintf("n%d", i), addr: netip.MustParseAddr(fmt.Sprintf("192.168.78.%d", i))}
		n, err := cp.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: k.name},
			Spec:       corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", i), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i)}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create node: %v", err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.addr.String()}, {Type: corev1.NodeHostName, Address: k.name}}
		if _, err := cp.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("node status: %v", err)
		}
		k.node = newNode(t, func(n *node) {
			port := fmt.Sprintf("p%d", i)
			attach(n.netns, port, k.addr.String())
			n.flags = append(n.flags, "--kubernetes", "--kubeconfig", cp.kubeconfig, "--node-name", k.name,
				"--cluster-cidr", "10.244.0.0/16", "--uplink", "ul0")
		})
		nodes = append(nodes, k)
	}
	// The nodes come from the API server alone: nobody ran `xlane node add`.
	for _, k := range nodes {
		var got []model.Node
		waitFor(t, 30*time.Second, k.name+": both Nodes as xlane nodes", func() bool {
			got = nil
			k.mustXlane(&got, "node", "ls")
			return len(got) == 2
		})
		for _, g := range got {
			want := nodes[0]
			if g.Name == "n2" {
				want = nodes[1]
			}
			if len(g.Underlay) != 1 || g.Underlay[0] != want.addr || len(g.PodCIDRs) != 1 || g.PodCIDRs[0].String() != fmt.Sprintf("10.244.%s.0/24", g.Name[1:]) {
				t.Errorf("%s: node %+v, want underlay %s and pod CIDR 10.244.%s.0/24", k.name, g, want.addr, g.Name[1:])
			}
		}
	}
	for _, k := range nodes {
		k.mustXlane(nil, "network", "create", "pods", "--mode", "tc")
		k.pod = newNetns(t, "pod")
		var ep api.EndpointInfo
		k.mustXlane(&ep, "endpoint", "add", "pods", "--netns", k.pod)
		k.podIP = ep.IPs[0]
	}
	client := newNetns(t, "client")
	nodes[0].mustXlane(nil, "endpoint", "add", "pods", "--netns", client)
	for _, k := range nodes {
		startNameServer(t, k.pod, k.name, netip.AddrPortFrom(k.podIP, 8080))
	}

	// web: NodePort 30080 on both pods; local: NodePort 30081,
	// externalTrafficPolicy Local, on both pods; bulk: a ClusterIP on
	// pod2 alone (port 9090, where transfers listen).
	svc := func(name string, port, nodePort int32, target int, local bool) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port, NodePort: nodePort, TargetPort: intstr.FromInt(target)}}}}
		if local {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		s, err := cp.cs.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service %s: %v", name, err)
		}
		return s
	}
	slice := func(service string, port int32, eps ...*k8sNode) {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: service + "-1",
				Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "xlane-e2e"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
		}
		for _, k := range eps {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{k.podIP.String()}, NodeName: ptr.To(k.name),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		if _, err := cp.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create endpointslice: %v", err)
		}
	}
	start := time.Now()
	web := svc("web", 80, 30080, 8080, false)
	slice("web", 8080, nodes...)
	svc("local", 80, 30081, 8080, true)
	slice("local", 8080, nodes...)
	bulk := svc("bulk", 80, 30090, 9090, true)
	slice("bulk", 9090, nodes[1])
	webVIP := netip.AddrPortFrom(netip.MustParseAddr(web.Spec.ClusterIP), 80)
	bulkVIP := netip.AddrPortFrom(netip.MustParseAddr(bulk.Spec.ClusterIP), 80)
	for _, k := range nodes {
		waitService(t, k.node, "k8s.default.web.tcp80.c0", 2)
		waitService(t, k.node, "k8s.default.bulk.tcp80.n0", map[string]int{"n1": 0, "n2": 1}[k.name])
	}
	t.Logf("three services on both nodes %v after their creation", time.Since(start).Round(time.Millisecond))

	t.Run("clusterip", func(t *testing.T) {
		seen := map[string]int{}
		for range 40 {
			seen[dialVIP(t, client, webVIP).backend]++
		}
		if seen["n1"] == 0 || seen["n2"] == 0 || len(seen) != 2 {
			t.Errorf("40 connections to %s reached %v, want both pods", webVIP, seen)
		}
		// SHA-256-checked, across nodes: the ClusterIP's backend is on n2.
		transferVia(t, client, nodes[1].pod, netip.AddrPortFrom(nodes[1].podIP, 9090), bulkVIP, 16<<20)
	})
	t.Run("nodeport from a pod", func(t *testing.T) {
		seen := map[string]int{}
		for range 40 {
			seen[dialVIP(t, client, netip.AddrPortFrom(nodes[0].addr, 30080)).backend]++
		}
		if seen["n1"] == 0 || seen["n2"] == 0 || len(seen) != 2 {
			t.Errorf("40 connections to n1's NodePort reached %v, want both pods (externalTrafficPolicy Cluster)", seen)
		}
	})
	t.Run("sessionAffinity ClientIP with a timeout", func(t *testing.T) {
		setAffinity := func(on bool) {
			t.Helper()
			s, err := cp.cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
			if on {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
			}
			if _, err := cp.cs.CoreV1().Services("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, k := range nodes {
				waitFor(t, 10*time.Second, fmt.Sprintf("%s: web's affinity %v", k.name, on), func() bool {
					var got model.Service
					k.mustXlane(&got, "service", "inspect", "k8s.default.web.tcp80.c0")
					return got.Affinity == on && (!on || got.AffinityTimeout == 60) && len(got.Backends) == 2
				})
			}
		}
		setAffinity(true)
		seen := map[string]int{}
		for range 20 {
			seen[dialVIP(t, client, webVIP).backend]++
		}
		if len(seen) != 1 {
			t.Errorf("20 connections from one pod to %s with ClientIP affinity reached %v, want one pod", webVIP, seen)
		}
		setAffinity(false)
	})
	t.Run("nodeport from outside, externalTrafficPolicy Local", func(t *testing.T) {
		for _, k := range nodes {
			for range 10 {
				if got := dialVIP(t, ext, netip.AddrPortFrom(k.addr, 30081)).backend; got != k.name {
					t.Fatalf("NodePort of %s reached %s's pod, want its own (externalTrafficPolicy Local)", k.name, got)
				}
			}
		}
		// SHA-256-checked through n2's NodePort to its pod.
		transferVia(t, ext, nodes[1].pod, netip.AddrPortFrom(nodes[1].podIP, 9090), netip.AddrPortFrom(nodes[1].addr, 30090), 16<<20)
	})
	t.Run("the kubernetes service from a pod", func(t *testing.T) {
		// The API server's own Service (10.96.0.1:443, its EndpointSlice
		// written by the API server): a pod reaches it through the
		// ClusterIP. The DNATed flow keeps the pod's address (xlane
		// masquerades no service flow), so the control plane routes n1's
		// pod CIDR to n1, as a cloud's route table would.
		runIn(t, cpNS, "ip", "route", "add", "10.244.1.0/24", "via", nodes[0].addr.String())
		kvip := netip.MustParseAddrPort("10.96.0.1:443")
		waitService(t, nodes[0].node, "k8s.default.kubernetes.tcp443.c0", 1)
		var c net.Conn
		err := ns.WithNetNSPath(nsPath(client), func(ns.NetNS) error {
			var err error
			c, err = net.DialTimeout("tcp", kvip.String(), 5*time.Second)
			return err
		})
		if err != nil {
			t.Fatalf("connect %s from a pod: %v", kvip, err)
		}
		c.Close()
	})
	t.Run("terminating endpoint drained", func(t *testing.T) {
		es, err := cp.cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range es.Endpoints {
			if *es.Endpoints[i].NodeName == "n2" {
				es.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
			}
		}
		if _, err := cp.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := netip.AddrPortFrom(nodes[1].podIP, 8080)
		waitFor(t, 10*time.Second, "n2's pod drained (weight 0)", func() bool {
			var s model.Service
			nodes[0].mustXlane(&s, "service", "inspect", "k8s.default.web.tcp80.c0")
			for _, b := range s.Backends {
				if b.Addr == want {
					return b.Weight == 0
				}
			}
			return false
		})
		for range 20 {
			if got := dialVIP(t, client, webVIP).backend; got != "n1" {
				t.Fatalf("a new connection reached the terminating pod on %s", got)
			}
		}
	})
	t.Run("service deleted", func(t *testing.T) {
		if err := cp.cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, k := range nodes {
			waitFor(t, 10*time.Second, k.name+": web's services gone", func() bool {
				var svcs []model.Service
				k.mustXlane(&svcs, "service", "ls")
				for _, s := range svcs {
					if strings.HasPrefix(s.Name, "k8s.default.web.") {
						return false
					}
				}
				return true
			})
		}
		err := ns.WithNetNSPath(nsPath(client), func(ns.NetNS) error {
			c, err := net.DialTimeout("tcp", webVIP.String(), 2*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("%s still answers after its Service was deleted", webVIP)
		}
	})
}

// waitService waits until node n has the xlane service name with
// backends backends.
func waitService(t *testing.T, n *node, name string, backends int) {
	t.Helper()
	var s model.Service
	waitFor(t, 30*time.Second, fmt.Sprintf("service %s with %d backends", name, backends), func() bool {
		_, _, err := n.xlane("service", "inspect", name)
		if err != nil {
			return false
		}
		s = model.Service{}
		n.mustXlane(&s, "service", "inspect", name)
		return len(s.Backends) == backends
	})
}

// waitFor polls cond every 100 ms until it holds, failing the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}
