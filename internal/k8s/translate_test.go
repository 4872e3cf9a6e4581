package k8s

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

func svc(name string, mod ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

// ep is one slice endpoint: address, node, and conditions (r ready, s
// serving, t terminating; "-" none set).
type ep struct {
	addr, node, cond string
}

func slice(service, name string, fam discoveryv1.AddressType, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: fam,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
	}
	for _, e := range eps {
		de := discoveryv1.Endpoint{Addresses: []string{e.addr}, NodeName: ptr.To(e.node)}
		if e.cond != "-" {
			de.Conditions = discoveryv1.EndpointConditions{
				Ready:       ptr.To(strings.Contains(e.cond, "r")),
				Serving:     ptr.To(strings.Contains(e.cond, "s")),
				Terminating: ptr.To(strings.Contains(e.cond, "t")),
			}
		}
		s.Endpoints = append(s.Endpoints, de)
	}
	return s
}

var (
	v4 = discoveryv1.AddressTypeIPv4
	v6 = discoveryv1.AddressTypeIPv6
)

// sc is an expected service: name, vip, backends, affinity (with
// Kubernetes' default timeout).
// It is written as text (read as the API edge reads it) for the table's
// sake; Translate's output is model.Service.
func sc(name, vip string, affinity bool, backends ...string) model.Service {
	if backends == nil {
		backends = []string{}
	}
	req := api.ServiceCreate{Name: name, VIP: vip, Backends: backends, Affinity: affinity}
	if affinity {
		req.AffinityTimeout = 10800
	}
	s, err := req.Service()
	if err != nil {
		panic(err)
	}
	return s
}

// withTimeout is s with ClientIP affinity of timeout seconds.
func withTimeout(s model.Service, timeout int) model.Service {
	s.Affinity, s.AffinityTimeout = true, timeout
	return s
}

func TestTranslate(t *testing.T) {
	self := "n1"
	nodeAddrs := []netip.Addr{netip.MustParseAddr("192.168.50.1"), netip.MustParseAddr("fd00:50::1")}
	twoNodes := slice("web", "web-1", v4, 8080, ep{"10.244.1.5", "n1", "rs"}, ep{"10.244.2.5", "n2", "rs"})
	for _, c := range []struct {
		name     string
		services []*corev1.Service
		slices   []*discoveryv1.EndpointSlice
		want     []model.Service
		skipped  int
	}{
		{
			name:     "clusterip",
			services: []*corev1.Service{svc("web")},
			slices:   []*discoveryv1.EndpointSlice{twoNodes},
			want:     []model.Service{sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false, "10.244.1.5:8080@1", "10.244.2.5:8080@1")},
		},
		{
			name:     "no endpoints: the vip exists without backends",
			services: []*corev1.Service{svc("web")},
			want:     []model.Service{sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false)},
		},
		{
			name: "dual-stack: each family its slices",
			services: []*corev1.Service{svc("web", func(s *corev1.Service) {
				s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
			})},
			slices: []*discoveryv1.EndpointSlice{twoNodes, slice("web", "web-6", v6, 8080, ep{"fd00:244:0:1::5", "n1", "rs"})},
			want: []model.Service{
				sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false, "10.244.1.5:8080@1", "10.244.2.5:8080@1"),
				sc("k8s.default.web.tcp80.c1", "[fd00:96::10]:80/tcp", false, "[fd00:244:0:1::5]:8080@1"),
			},
		},
		{
			name: "nodeport on this node's addresses, sessionAffinity ClientIP",
			services: []*corev1.Service{svc("web", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			})},
			slices: []*discoveryv1.EndpointSlice{twoNodes},
			want: []model.Service{
				sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", true, "10.244.1.5:8080@1", "10.244.2.5:8080@1"),
				sc("k8s.default.web.tcp80.n0", "192.168.50.1:30080/tcp", true, "10.244.1.5:8080@1", "10.244.2.5:8080@1"),
				sc("k8s.default.web.tcp80.n1", "[fd00:50::1]:30080/tcp", true),
			},
		},
		{
			name: "sessionAffinity ClientIP with sessionAffinityConfig.clientIP.timeoutSeconds",
			services: []*corev1.Service{svc("web", func(s *corev1.Service) {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
			})},
			slices: []*discoveryv1.EndpointSlice{twoNodes},
			want: []model.Service{
				withTimeout(sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false, "10.244.1.5:8080@1", "10.244.2.5:8080@1"), 60),
			},
		},
		{
			name: "loadbalancer, externalTrafficPolicy Local: external vips this node's endpoints only",
			services: []*corev1.Service{svc("web", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.ExternalIPs = []string{"203.0.113.7"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}, {Hostname: "lb.example"}}
			})},
			slices: []*discoveryv1.EndpointSlice{twoNodes},
			want: []model.Service{
				sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false, "10.244.1.5:8080@1", "10.244.2.5:8080@1"),
				sc("k8s.default.web.tcp80.n0", "192.168.50.1:30080/tcp", false, "10.244.1.5:8080@1"),
				sc("k8s.default.web.tcp80.n1", "[fd00:50::1]:30080/tcp", false),
				sc("k8s.default.web.tcp80.x0", "203.0.113.7:80/tcp", false, "10.244.1.5:8080@1"),
				sc("k8s.default.web.tcp80.x1", "198.51.100.1:80/tcp", false, "10.244.1.5:8080@1"),
			},
		},
		{
			name: "internalTrafficPolicy Local: the clusterip this node's endpoints only",
			services: []*corev1.Service{svc("web", func(s *corev1.Service) {
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			})},
			slices: []*discoveryv1.EndpointSlice{twoNodes},
			want:   []model.Service{sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false, "10.244.1.5:8080@1")},
		},
		{
			name:     "terminating endpoints drained, not-serving ones left out, unset conditions ready",
			services: []*corev1.Service{svc("web")},
			slices: []*discoveryv1.EndpointSlice{slice("web", "web-1", v4, 8080,
				ep{"10.244.1.5", "n1", "rs"}, ep{"10.244.1.6", "n1", "st"}, ep{"10.244.1.7", "n1", "t"},
				ep{"10.244.1.8", "n1", ""}, ep{"10.244.1.9", "n2", "-"})},
			want: []model.Service{sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false, "10.244.1.5:8080@1", "10.244.1.6:8080@0", "10.244.1.9:8080@1")},
		},
		{
			name:     "only terminating endpoints: the serving ones take new flows",
			services: []*corev1.Service{svc("web")},
			slices:   []*discoveryv1.EndpointSlice{slice("web", "web-1", v4, 8080, ep{"10.244.1.6", "n1", "st"}, ep{"10.244.1.7", "n1", "t"})},
			want:     []model.Service{sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false, "10.244.1.6:8080@1")},
		},
		{
			name: "ports matched by name and protocol, an address in two slices once, udp, sctp left out",
			services: []*corev1.Service{svc("dns", func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
					{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53},
					{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 99},
				}
			})},
			slices: []*discoveryv1.EndpointSlice{
				{
					ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "dns-a", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
					AddressType: v4,
					Ports: []discoveryv1.EndpointPort{
						{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(5353))},
						{Name: ptr.To("dns-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(5354))},
					},
					Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}}},
				},
				{
					ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "dns-b", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
					AddressType: v4,
					Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(5353))}},
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}}, {Addresses: []string{"10.244.2.5"}}},
				},
			},
			want: []model.Service{
				sc("k8s.default.dns.tcp53.c0", "10.96.0.10:53/tcp", false, "10.244.1.5:5354@1"),
				sc("k8s.default.dns.udp53.c0", "10.96.0.10:53/udp", false, "10.244.1.5:5353@1", "10.244.2.5:5353@1"),
			},
		},
		{
			name: "headless and ExternalName: no vip; another namespace's slice is not ours",
			services: []*corev1.Service{
				svc("headless", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
				svc("ext", func(s *corev1.Service) {
					s.Spec.Type, s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ServiceTypeExternalName, "", nil
				}),
				svc("web"),
			},
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := slice("web", "web-x", v4, 8080, ep{"10.244.9.9", "n1", "rs"})
				s.Namespace = "other"
				return s
			}()},
			want: []model.Service{sc("k8s.default.web.tcp80.c0", "10.96.0.10:80/tcp", false)},
		},
		{
			name: "a vip claimed twice goes to the older service",
			services: []*corev1.Service{
				svc("newer", func(s *corev1.Service) {
					s.CreationTimestamp = metav1.NewTime(time.Unix(2000, 0))
					s.Spec.ClusterIPs = []string{"10.96.0.11"}
					s.Spec.ExternalIPs = []string{"203.0.113.7"}
				}),
				svc("older", func(s *corev1.Service) {
					s.CreationTimestamp = metav1.NewTime(time.Unix(1000, 0))
					s.Spec.ExternalIPs = []string{"203.0.113.7"}
				}),
			},
			want: []model.Service{
				sc("k8s.default.newer.tcp80.c0", "10.96.0.11:80/tcp", false),
				sc("k8s.default.older.tcp80.c0", "10.96.0.10:80/tcp", false),
				sc("k8s.default.older.tcp80.x0", "203.0.113.7:80/tcp", false),
			},
			skipped: 1,
		},
		{
			// The API server's validation leaves such external IPs and
			// ingress out, but a VIP the daemon refuses would fail the
			// whole apply: left out, and reported.
			name: "external IPs and ingress no service can have are left out",
			services: []*corev1.Service{
				svc("odd", func(s *corev1.Service) {
					s.Spec.Type = corev1.ServiceTypeLoadBalancer
					s.Spec.ExternalIPs = []string{"0.0.0.0", "203.0.113.8", "224.0.0.1", "127.0.0.1"}
					s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "::"}, {IP: "255.255.255.255"}, {IP: "fe80::1"}}
				}),
			},
			want: []model.Service{
				sc("k8s.default.odd.tcp80.c0", "10.96.0.10:80/tcp", false),
				sc("k8s.default.odd.tcp80.x1", "203.0.113.8:80/tcp", false),
			},
			skipped: 6,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, skipped := Translate(Input{Services: c.services, Slices: c.slices, NodeName: self, NodeAddrs: nodeAddrs})
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("got\n%s\nwant\n%s", dump(got), dump(c.want))
			}
			if len(skipped) != c.skipped {
				t.Errorf("skipped %+v, want %d", skipped, c.skipped)
			}
		})
	}
}

func dump(s []model.Service) string {
	var b strings.Builder
	for _, x := range s {
		fmt.Fprintf(&b, "  %s %s %v affinity=%v/%d\n", x.Name, x.Key(), x.Backends, x.Affinity, x.AffinityTimeout)
	}
	return b.String()
}

// TestServiceName: names fit the daemon's rule (64 characters) and stay
// distinct when cut.
func TestServiceName(t *testing.T) {
	long := strings.Repeat("n", 63)
	a := serviceName(long, long, "tcp80", "c0")
	b := serviceName(long, long, "tcp81", "c0")
	if len(a) > model.MaxName || len(b) > model.MaxName || a == b || !strings.HasPrefix(a, NamePrefix) {
		t.Errorf("long names %q %q: want distinct, at most %d characters, prefixed %q", a, b, model.MaxName, NamePrefix)
	}
	if s := serviceName("default", "web", "tcp80", "c0"); s != "k8s.default.web.tcp80.c0" {
		t.Errorf("short name %q", s)
	}
}

func TestNodeRecord(t *testing.T) {
	node := func(podCIDR string, podCIDRs []string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec:   corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: podCIDRs},
			Status: corev1.NodeStatus{Addresses: addrs}}
	}
	in4 := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.50.1"}
	in4b := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.50.9"}
	in6 := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00:50::1"}
	ext := corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.1"}
	host := corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n1"}
	for _, c := range []struct {
		name string
		node *corev1.Node
		want api.NodeAdd
		ok   bool
	}{
		{"dual-stack, IPv4 first, the first InternalIP of a family",
			node("", []string{"fd00:244:0:1::/64", "10.244.1.0/24"}, host, in6, ext, in4, in4b),
			api.NodeAdd{Name: "n1", Underlay: []string{"192.168.50.1", "fd00:50::1"}, PodCIDRs: []string{"10.244.1.0/24", "fd00:244:0:1::/64"}}, true},
		{"spec.podCIDR alone", node("10.244.1.0/24", nil, in4),
			api.NodeAdd{Name: "n1", Underlay: []string{"192.168.50.1"}, PodCIDRs: []string{"10.244.1.0/24"}}, true},
		{"no pod CIDR yet", node("", nil, in4), api.NodeAdd{Name: "n1", Underlay: []string{"192.168.50.1"}}, false},
		{"no InternalIP", node("10.244.1.0/24", nil, ext, host), api.NodeAdd{Name: "n1", PodCIDRs: []string{"10.244.1.0/24"}}, false},
	} {
		want, err := c.want.Node() // the table in the API's text, read as the API reads it
		if err != nil {
			t.Fatalf("%s: want: %v", c.name, err)
		}
		got, ok := NodeRecord(c.node)
		if ok != c.ok || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, want, c.ok)
		}
	}
	if got := NodeAddrs(node("", nil, in4, ext, in6)); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.168.50.1"), netip.MustParseAddr("fd00:50::1")}) {
		t.Errorf("NodeAddrs = %v", got)
	}
}

// BenchmarkTranslate10k: the translation of 10,000 Services with two
// endpoints each (a sync at the scale).
func BenchmarkTranslate10k(b *testing.B) {
	var in Input
	in.NodeName = "n1"
	for i := range 10000 {
		name := fmt.Sprintf("s%d", i)
		in.Services = append(in.Services, svc(name, func(s *corev1.Service) {
			ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
		}))
		in.Slices = append(in.Slices, slice(name, name+"-1", v4, 8080,
			ep{fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), "n1", "rs"}, ep{fmt.Sprintf("10.245.%d.%d", i/250, i%250+1), "n2", "rs"}))
	}
	for b.Loop() {
		out, _ := Translate(in)
		if len(out) != 10000 {
			b.Fatal(len(out))
		}
	}
}
