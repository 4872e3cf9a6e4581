package k8s

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// The pods of the policy tests: web on n2 (container port "http" 8080,
// "metrics" 9100), db on n2 ("http" 5432: named like web's, another
// number), client in team-a on n1, other in default on n1.
func policyPods() []*corev1.Pod {
	p := func(ns, name, node string, lbl map[string]string, ips []string, ports ...corev1.ContainerPort) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: ports}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return pod
	}
	return []*corev1.Pod{
		p("default", "web", "n2", map[string]string{"app": "web"}, []string{"10.244.2.10", "fd00:244:0:2::10"},
			corev1.ContainerPort{Name: "http", ContainerPort: 8080}, corev1.ContainerPort{Name: "metrics", ContainerPort: 9100}),
		p("default", "db", "n2", map[string]string{"app": "db"}, []string{"10.244.2.20", "fd00:244:0:2::20"},
			corev1.ContainerPort{Name: "http", ContainerPort: 5432}),
		p("team-a", "client", "n1", map[string]string{"app": "client"}, []string{"10.244.1.10", "fd00:244:0:1::10"}),
		p("default", "other", "n1", map[string]string{"app": "other"}, []string{"10.244.1.20", "fd00:244:0:1::20"}),
		// Not a peer: host network, and finished.
		func() *corev1.Pod {
			x := p("default", "hostnet", "n1", map[string]string{"app": "client"}, []string{"192.168.78.1"})
			x.Spec.HostNetwork = true
			return x
		}(),
		func() *corev1.Pod {
			x := p("team-a", "done", "n1", map[string]string{"app": "client"}, []string{"10.244.1.99"})
			x.Status.Phase = corev1.PodSucceeded
			return x
		}(),
	}
}

func policyNamespaces() []*corev1.Namespace {
	return []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"kubernetes.io/metadata.name": "team-a", "team": "a"}}},
	}
}

func netpol(ns, name string, sel map[string]string, mod func(*networkingv1.NetworkPolicySpec)) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}}}
	mod(&np.Spec)
	return np
}

func tcpPort(p intstr.IntOrString) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: &p}
}

// conn is a connection to check: from pod to pod's port (TCP unless
// proto says), IPv4 or IPv6; want "allow", or the rule that drops it.
type conn struct {
	from, to string
	port     uint32
	proto    uint8
	v6       bool
	want     string
}

// TestTranslatePolicies: the rules of NetworkPolicies, each node's set
// validated by the firewall and run through its reference model
// (Policy.Evaluate): a connection is allowed when the sender's node lets
// it out of the sender and the receiver's node lets it into the receiver.
func TestTranslatePolicies(t *testing.T) {
	pods := policyPods()
	for _, c := range []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		conns    []conn
		rules    int // on n2, 0: not checked
	}{
		{
			// Egress through a Service is judged on the backend the
			// datapath picked (the from-endpoint stage after the DNAT):
			// the rules name pods, never a ClusterIP
			// (TestControllerPolicyRulesNameNoVIP).
			name: "egress to pods by a named port",
			policies: []*networkingv1.NetworkPolicy{netpol("team-a", "out", map[string]string{"app": "client"}, func(s *networkingv1.NetworkPolicySpec) {
				s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				s.Egress = []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromString("http"))}}}
			})},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "web", port: 8080, v6: true, want: "allow"},
				{from: "client", to: "web", port: 9100, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "db", port: 5432, want: "k8s.np.team-a.out.eg-deny"}, // its "http", not web's
				{from: "other", to: "db", port: 5432, want: "allow"},
			},
		},
		{
			name: "egress to any peer at a port",
			policies: []*networkingv1.NetworkPolicy{netpol("team-a", "out", map[string]string{"app": "client"}, func(s *networkingv1.NetworkPolicySpec) {
				s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				s.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt(8080))}}}
			})},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "db", port: 5432, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "db", port: 8080, want: "allow"},
			},
		},
		{
			name: "no policy: everything allowed",
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "other", to: "db", port: 1, v6: true, want: "allow"},
			},
		},
		{
			name: "deny all ingress",
			policies: []*networkingv1.NetworkPolicy{netpol("default", "deny", nil, func(s *networkingv1.NetworkPolicySpec) {
				s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			})},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "k8s.np.default.deny.in-deny"},
				{from: "client", to: "db", port: 5432, v6: true, want: "k8s.np.default.deny.in-deny"},
				{from: "web", to: "client", port: 80, want: "allow"}, // egress not isolated, client not selected
				{from: "node", to: "web", port: 8080, want: "allow"}, // its own node
			},
		},
		{
			name: "namespaceSelector and podSelector combined, named port",
			policies: []*networkingv1.NetworkPolicy{netpol("default", "web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
				s.Ingress = []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromString("http"))},
				}}
			})},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "web", port: 8080, v6: true, want: "allow"},
				{from: "client", to: "web", port: 9100, want: "k8s.np.default.web.in-deny"},
				{from: "client", to: "web", port: 8080, proto: 17, want: "k8s.np.default.web.in-deny"},
				{from: "other", to: "web", port: 8080, want: "k8s.np.default.web.in-deny"},
				{from: "client", to: "db", port: 5432, want: "allow"}, // db not selected
			},
			rules: 4, // in0, in-deny, node.in, node.eg
		},
		{
			name: "podSelector alone is the policy's namespace",
			policies: []*networkingv1.NetworkPolicy{netpol("default", "web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
				s.Ingress = []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}}
			})},
			conns: []conn{
				{from: "other", to: "web", port: 1, want: "allow"},
				{from: "db", to: "web", port: 1, v6: true, want: "allow"},
				{from: "client", to: "web", port: 1, want: "k8s.np.default.web.in-deny"},
			},
		},
		{
			name: "namespaceSelector alone, a named port resolved per selected pod",
			policies: []*networkingv1.NetworkPolicy{netpol("default", "http", nil, func(s *networkingv1.NetworkPolicySpec) {
				s.Ingress = []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}},
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromString("http"))},
				}}
			})},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "db", port: 5432, v6: true, want: "allow"},
				{from: "client", to: "web", port: 5432, want: "k8s.np.default.http.in-deny"},
				{from: "client", to: "db", port: 8080, want: "k8s.np.default.http.in-deny"},
				{from: "other", to: "db", port: 5432, want: "k8s.np.default.http.in-deny"},
			},
		},
		{
			name: "egress: ipBlock with except, port range, two rules",
			policies: []*networkingv1.NetworkPolicy{netpol("team-a", "out", map[string]string{"app": "client"}, func(s *networkingv1.NetworkPolicySpec) {
				s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				s.Egress = []networkingv1.NetworkPolicyEgressRule{
					{To: []networkingv1.NetworkPolicyPeer{
						{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{"10.244.2.0/24"}}},
						{IPBlock: &networkingv1.IPBlock{CIDR: "fd00:244::/48", Except: []string{"fd00:244:0:2::/64"}}}},
						Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt(8080))}},
					{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
						Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt(9000)), EndPort: ptr.To(int32(9100))}}},
				}
			})},
			conns: []conn{
				{from: "client", to: "other", port: 8080, want: "allow"},
				{from: "client", to: "other", port: 8080, v6: true, want: "allow"},
				{from: "client", to: "other", port: 8081, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "web", port: 8080, want: "k8s.np.team-a.out.eg-deny"}, // excepted
				{from: "client", to: "web", port: 8080, v6: true, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "web", port: 9100, want: "allow"},
				{from: "client", to: "web", port: 9000, v6: true, want: "allow"},
				{from: "client", to: "web", port: 9101, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "db", port: 9050, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "node", port: 10250, want: "allow"},
				{from: "other", to: "web", port: 1, want: "allow"},
			},
		},
		{
			name: "egress named port resolved in the peers",
			policies: []*networkingv1.NetworkPolicy{netpol("team-a", "out", map[string]string{"app": "client"}, func(s *networkingv1.NetworkPolicySpec) {
				s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				s.Egress = []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromString("http"))}}}
			})},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "db", port: 5432, v6: true, want: "allow"},
				{from: "client", to: "db", port: 8080, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "web", port: 5432, want: "k8s.np.team-a.out.eg-deny"},
			},
		},
		{
			// The upstream suite's "should allow egress access on one
			// named port": no `to`, so every pod of the cluster is a
			// peer, and the name resolves in each.
			name: "egress named port without peers resolved in every pod",
			policies: []*networkingv1.NetworkPolicy{netpol("team-a", "out", map[string]string{"app": "client"}, func(s *networkingv1.NetworkPolicySpec) {
				s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				s.Egress = []networkingv1.NetworkPolicyEgressRule{{
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromString("http"))}}}
			})},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "db", port: 5432, v6: true, want: "allow"},
				{from: "client", to: "db", port: 8080, want: "k8s.np.team-a.out.eg-deny"},
				{from: "client", to: "web", port: 9100, want: "k8s.np.team-a.out.eg-deny"},
			},
		},
		{
			name: "two policies OR-ed; an empty rule allows all",
			policies: []*networkingv1.NetworkPolicy{
				netpol("default", "a-web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
					s.Ingress = []networkingv1.NetworkPolicyIngressRule{{
						From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}}},
						Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt(8080))}}}
				}),
				netpol("default", "b-web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
					s.Ingress = []networkingv1.NetworkPolicyIngressRule{{
						From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.1.0/24"}}},
						Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt(9100))}}}
				}),
				netpol("default", "c-db", map[string]string{"app": "db"}, func(s *networkingv1.NetworkPolicySpec) {
					s.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
				}),
			},
			conns: []conn{
				{from: "other", to: "web", port: 8080, want: "allow"},
				{from: "other", to: "web", port: 9100, want: "allow"},
				{from: "client", to: "web", port: 9100, want: "allow"},
				{from: "client", to: "web", port: 9100, v6: true, want: "k8s.np.default.a-web.in-deny"},
				{from: "client", to: "web", port: 8080, want: "k8s.np.default.a-web.in-deny"},
				{from: "client", to: "db", port: 1, proto: 17, v6: true, want: "allow"},
			},
		},
		{
			name: "a selector that selects nothing allows nothing; SCTP only allows nothing",
			policies: []*networkingv1.NetworkPolicy{netpol("default", "web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
				s.Ingress = []networkingv1.NetworkPolicyIngressRule{
					{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nobody"}}}}},
					{Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolSCTP), Port: ptr.To(intstr.FromInt(80))}}},
				}
			})},
			conns: []conn{
				{from: "other", to: "web", port: 80, want: "k8s.np.default.web.in-deny"},
				{from: "client", to: "web", port: 80, proto: 132, want: "k8s.np.default.web.in-deny"},
			},
			rules: 3,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkPolicyConns(t, PolicyInput{Policies: c.policies, Pods: pods, Namespaces: policyNamespaces()}, c.conns, c.rules)
		})
	}
}

// checkPolicyConns translates in for both nodes (n1, n2: their
// NodeName and NodeAddrs set here), validates each node's rules and
// checks the connections against the reference model; wantRules is the
// number of rules wanted on n2 (0: not checked).
func checkPolicyConns(t *testing.T, in PolicyInput, conns []conn, wantRules int) {
	t.Helper()
	addr := map[string][2]netip.Addr{}
	node := map[string]string{}
	for _, p := range in.Pods {
		if len(p.Status.PodIPs) == 2 {
			addr[p.Name] = [2]netip.Addr{netip.MustParseAddr(p.Status.PodIPs[0].IP), netip.MustParseAddr(p.Status.PodIPs[1].IP)}
			node[p.Name] = p.Spec.NodeName
		}
	}
	nodeAddrs := map[string][]netip.Addr{"n1": {netip.MustParseAddr("192.168.78.1")}, "n2": {netip.MustParseAddr("192.168.78.2")}}
	pols := map[string]*firewall.Policy{}
	for _, n := range []string{"n1", "n2"} {
		in.NodeName, in.NodeAddrs = n, nodeAddrs[n]
		got := TranslatePolicies(in)
		if n == "n2" && wantRules != 0 && len(got) != wantRules {
			t.Errorf("%d rules on n2, want %d:\n%s", len(got), wantRules, ruleDump(got))
		}
		for _, r := range got {
			if !strings.HasPrefix(r.Name, PolicyPrefix) || len(r.Name) > 64 {
				t.Errorf("rule name %q", r.Name)
			}
		}
		pol, err := firewall.Validate(&rules.RuleSet{Rules: got}, firewall.MapResolver{})
		if err != nil {
			t.Fatalf("%s: validate: %v\n%s", n, err, ruleDump(got))
		}
		pols[n] = pol
	}
	for _, cn := range conns {
		fam := 0
		if cn.v6 {
			fam = 1
		}
		src, dst := addr[cn.from][fam], addr[cn.to][fam]
		if cn.from == "node" {
			src = netip.MustParseAddr("192.168.78.2")
		}
		if cn.to == "node" {
			dst = netip.MustParseAddr("192.168.78.1")
		}
		pk := firewall.Packet{Src: src, Dst: dst, Proto: cmpOr(cn.proto, 6), SPort: 40000, DPort: cn.port, Net: 1}
		got := "allow"
		if n, ok := node[cn.from]; ok {
			pk.Kind = firewall.KindFromEP
			if r := decide(pols[n], pk); r != "" {
				got = r
			}
		}
		if n, ok := node[cn.to]; ok && got == "allow" {
			pk.Kind = firewall.KindToEP
			if r := decide(pols[n], pk); r != "" {
				got = r
			}
		}
		if got != cn.want {
			t.Errorf("%s -> %s:%d (proto %d, v6 %v): %s, want %s", cn.from, cn.to, cn.port, pk.Proto, cn.v6, got, cn.want)
		}
	}
}

func cmpOr(a, b uint8) uint8 {
	if a != 0 {
		return a
	}
	return b
}

// decide returns the rule that drops pk, or "" when it is allowed.
func decide(p *firewall.Policy, pk firewall.Packet) string {
	i, _ := p.Evaluate(pk)
	if i < 0 || p.Rules[i].Action != 0 { // bpf.FwAllow is 0
		if i < 0 {
			return ""
		}
		return p.Rules[i].Name
	}
	return ""
}

func ruleDump(rs []rules.Rule) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %s %s %s src=%v dst=%v proto=%v dport=%v\n", r.Name, r.Action, r.Direction, r.Src, r.Dst, r.Proto, r.DstPort)
	}
	return b.String()
}

func TestSubtractPrefixes(t *testing.T) {
	for _, c := range []struct {
		p      string
		except []string
		want   string
	}{
		{"10.0.0.0/8", nil, "[10.0.0.0/8]"},
		{"10.0.0.0/8", []string{"10.0.0.0/8"}, "[]"},
		{"10.0.0.0/8", []string{"0.0.0.0/0"}, "[]"},
		{"10.0.0.0/8", []string{"fd00::/8"}, "[10.0.0.0/8]"},
		{"10.0.0.0/30", []string{"10.0.0.1/32"}, "[10.0.0.0/32 10.0.0.2/31]"},
		{"10.0.0.0/24", []string{"10.0.0.128/25", "10.0.0.0/26"}, "[10.0.0.64/26]"},
		{"fd00::/126", []string{"fd00::3/128"}, "[fd00::/127 fd00::2/128]"},
	} {
		var ex []netip.Prefix
		for _, e := range c.except {
			ex = append(ex, netip.MustParsePrefix(e))
		}
		got := subtractPrefixes(netip.MustParsePrefix(c.p), ex)
		if got == nil {
			got = []netip.Prefix{}
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s except %v = %v, want %s", c.p, c.except, got, c.want)
		}
	}
}

// TestPolicyRuleNames: long names fit the firewall's 64 characters and
// stay distinct.
func TestPolicyRuleNames(t *testing.T) {
	long := strings.Repeat("n", 63)
	a, b := policyRuleName(long+"."+long, "in0"), policyRuleName(long+"."+long, "in1")
	if len(a) > 64 || len(b) > 64 || a == b || !strings.HasPrefix(a, PolicyPrefix) {
		t.Errorf("names %q and %q", a, b)
	}
	if got := policyRuleName("default.web", "in-deny"); got != "k8s.np.default.web.in-deny" {
		t.Errorf("short name %q", got)
	}
}
