package k8s

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

func newCNP(name, tier string, prio int32, subject CNPSubject, ingress, egress []CNPRule) *ClusterNetworkPolicy {
	return &ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: CNPSpec{Tier: tier, Priority: prio, Subject: subject, Ingress: ingress, Egress: egress}}
}

func nsSubject(lbl map[string]string) CNPSubject {
	return CNPSubject{Namespaces: &metav1.LabelSelector{MatchLabels: lbl}}
}

func podSubject(ns, pod map[string]string) CNPSubject {
	return CNPSubject{Pods: &CNPNamespacedPod{NamespaceSelector: metav1.LabelSelector{MatchLabels: ns}, PodSelector: metav1.LabelSelector{MatchLabels: pod}}}
}

func nsPeer(lbl map[string]string) CNPPeer {
	return CNPPeer{Namespaces: &metav1.LabelSelector{MatchLabels: lbl}}
}

func tcpTo(port int32) CNPProtocol {
	return CNPProtocol{TCP: &CNPPorts{DestinationPort: &CNPPort{Number: port}}}
}

func policyNodes() []*corev1.Node {
	n := func(name, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	return []*corev1.Node{n("n1", "192.168.78.1"), n("n2", "192.168.78.2")}
}

var (
	teamA     = map[string]string{"team": "a"}
	defaultNS = map[string]string{"kubernetes.io/metadata.name": "default"}
	anyNS     = map[string]string{}
)

// TestTranslateClusterPolicies: ClusterNetworkPolicies with and without
// NetworkPolicies, each node's rules validated by the firewall and run
// through its reference model (checkPolicyConns): the Admin tier before
// NetworkPolicy, the Baseline tier after it, Pass, priorities, rule
// order, and every kind of peer.
func TestTranslateClusterPolicies(t *testing.T) {
	allowAllToWeb := netpol("default", "web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
		s.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
	})
	webFromTeamA8080 := netpol("default", "web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
		s.Ingress = []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: teamA}}},
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt(8080))}}}
	})
	for _, c := range []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		cnps     []*ClusterNetworkPolicy
		conns    []conn
	}{
		{
			name:     "an Admin Deny beats a NetworkPolicy's allowance",
			policies: []*networkingv1.NetworkPolicy{allowAllToWeb},
			cnps: []*ClusterNetworkPolicy{newCNP("no-team-a", CNPTierAdmin, 10, nsSubject(defaultNS),
				[]CNPRule{{Action: CNPDeny, From: []CNPPeer{nsPeer(teamA)}}}, nil)},
			conns: []conn{
				{from: "client", to: "web", port: 80, want: "k8s.np.admin:no-team-a.in0"},
				{from: "client", to: "web", port: 80, v6: true, want: "k8s.np.admin:no-team-a.in0"},
				{from: "client", to: "db", port: 80, want: "k8s.np.admin:no-team-a.in0"},
				{from: "other", to: "web", port: 80, want: "allow"},
				{from: "web", to: "client", port: 80, want: "allow"}, // ingress only
			},
		},
		{
			name:     "an Admin Pass hands over to NetworkPolicy, then the Baseline tier",
			policies: []*networkingv1.NetworkPolicy{webFromTeamA8080},
			cnps: []*ClusterNetworkPolicy{
				newCNP("admin", CNPTierAdmin, 5, nsSubject(defaultNS), []CNPRule{
					{Action: CNPPass, From: []CNPPeer{nsPeer(teamA)}},
					{Action: CNPDeny, From: []CNPPeer{nsPeer(anyNS)}, Protocols: []CNPProtocol{tcpTo(22)}},
				}, nil),
				newCNP("base", CNPTierBaseline, 5, nsSubject(defaultNS), []CNPRule{
					{Action: CNPDeny, From: []CNPPeer{nsPeer(teamA)}},
				}, nil),
			},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},                                // NetworkPolicy
				{from: "client", to: "web", port: 22, want: "k8s.np.default.web.in-deny"},             // passed: not the admin deny
				{from: "client", to: "db", port: 5432, want: "k8s.np.baseline:base.in0"},              // no NetworkPolicy: baseline
				{from: "client", to: "db", port: 22, v6: true, want: "k8s.np.baseline:base.in0"},      //
				{from: "other", to: "db", port: 22, want: "k8s.np.admin:admin.in1"},                   // no pass for default
				{from: "other", to: "db", port: 5432, want: "allow"},                                  // nothing decides
				{from: "other", to: "web", port: 8080, want: "k8s.np.default.web.in-deny"},            // NetworkPolicy
				{from: "client", to: "other", port: 8080, v6: true, want: "k8s.np.baseline:base.in0"}, // other on n1
			},
		},
		{
			name:     "a NetworkPolicy decides for the pods it selects: the Baseline tier does not",
			policies: []*networkingv1.NetworkPolicy{webFromTeamA8080},
			cnps: []*ClusterNetworkPolicy{newCNP("base", CNPTierBaseline, 1, nsSubject(defaultNS), []CNPRule{
				{Action: CNPAccept, From: []CNPPeer{nsPeer(anyNS)}},
			}, nil)},
			conns: []conn{
				{from: "other", to: "web", port: 8080, want: "k8s.np.default.web.in-deny"},
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "db", port: 8080, want: "allow"},
			},
		},
		{
			name: "priorities, then the order of rules; an Admin Accept beats a later Deny of every tier",
			policies: []*networkingv1.NetworkPolicy{netpol("default", "deny-web", map[string]string{"app": "web"}, func(s *networkingv1.NetworkPolicySpec) {
				s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			})},
			cnps: []*ClusterNetworkPolicy{
				newCNP("p50-deny", CNPTierAdmin, 50, podSubject(anyNS, map[string]string{"app": "web"}), []CNPRule{
					{Action: CNPDeny, From: []CNPPeer{nsPeer(teamA)}},
				}, nil),
				newCNP("p40-accept", CNPTierAdmin, 40, podSubject(anyNS, map[string]string{"app": "web"}), []CNPRule{
					{Action: CNPDeny, From: []CNPPeer{nsPeer(teamA)}, Protocols: []CNPProtocol{tcpTo(9100)}},
					{Action: CNPAccept, From: []CNPPeer{nsPeer(teamA)}, Protocols: []CNPProtocol{
						{TCP: &CNPPorts{DestinationPort: &CNPPort{Range: &struct {
							Start int32 `json:"start"`
							End   int32 `json:"end"`
						}{8000, 9999}}}}}},
				}, nil),
			},
			conns: []conn{
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "web", port: 9100, want: "k8s.np.admin:p40-accept.in0"},
				{from: "client", to: "web", port: 7999, want: "k8s.np.admin:p50-deny.in0"},
				{from: "other", to: "web", port: 8080, want: "k8s.np.default.deny-web.in-deny"},
			},
		},
		{
			name: "egress: nodes, networks, named ports, a Baseline default deny",
			cnps: []*ClusterNetworkPolicy{
				newCNP("no-kubelet", CNPTierAdmin, 1, nsSubject(teamA), nil, []CNPRule{
					{Action: CNPDeny, To: []CNPPeer{{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "n1"}}}},
						Protocols: []CNPProtocol{tcpTo(10250)}},
					{Action: CNPAccept, To: []CNPPeer{{Networks: []string{"192.168.78.0/24"}}}, Protocols: []CNPProtocol{
						{UDP: &CNPPorts{DestinationPort: &CNPPort{Number: 53}}}}},
				}),
				newCNP("egress-baseline", CNPTierBaseline, 1, nsSubject(teamA), nil, []CNPRule{
					{Action: CNPAccept, To: []CNPPeer{nsPeer(defaultNS)}, Protocols: []CNPProtocol{{DestinationNamedPort: "http"}}},
					{Action: CNPDeny, To: []CNPPeer{nsPeer(anyNS), {Networks: []string{"0.0.0.0/0", "::/0"}}}},
				}),
			},
			conns: []conn{
				{from: "client", to: "node", port: 10250, want: "k8s.np.admin:no-kubelet.eg0"},
				{from: "client", to: "node", port: 53, proto: 17, want: "allow"},
				{from: "client", to: "node", port: 22, want: "k8s.np.baseline:egress-baseline.eg1"},
				{from: "client", to: "web", port: 8080, want: "allow"},
				{from: "client", to: "web", port: 8080, v6: true, want: "allow"},
				{from: "client", to: "db", port: 5432, want: "allow"},
				{from: "client", to: "db", port: 8080, want: "k8s.np.baseline:egress-baseline.eg1"},
				{from: "client", to: "web", port: 9100, want: "k8s.np.baseline:egress-baseline.eg1"},
				{from: "other", to: "web", port: 9100, want: "allow"},
			},
		},
		{
			name: "a Baseline Pass skips the rest of the Baseline tier",
			cnps: []*ClusterNetworkPolicy{newCNP("base", CNPTierBaseline, 1, nsSubject(anyNS), []CNPRule{
				{Action: CNPPass, From: []CNPPeer{nsPeer(teamA)}},
				{Action: CNPDeny, From: []CNPPeer{nsPeer(anyNS)}},
			}, nil)},
			conns: []conn{
				{from: "client", to: "web", port: 80, want: "allow"},
				{from: "other", to: "web", port: 80, want: "k8s.np.baseline:base.in1"},
			},
		},
		{
			name: "a peer of a newer API (no field known) fails closed: Deny denies all, Accept matches nothing",
			cnps: []*ClusterNetworkPolicy{
				newCNP("a-accept-unknown", CNPTierAdmin, 1, nsSubject(defaultNS), []CNPRule{{Action: CNPAccept, From: []CNPPeer{{}}}}, nil),
				newCNP("b-deny-unknown", CNPTierAdmin, 2, podSubject(anyNS, map[string]string{"app": "db"}), []CNPRule{{Action: CNPDeny, From: []CNPPeer{{}}}}, nil),
			},
			conns: []conn{
				{from: "client", to: "db", port: 80, want: "k8s.np.admin:b-deny-unknown.in0"},
				{from: "other", to: "db", port: 80, want: "k8s.np.admin:b-deny-unknown.in0"},
				{from: "client", to: "web", port: 80, want: "allow"},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := PolicyInput{Policies: c.policies, ClusterPolicies: c.cnps, Pods: policyPods(), Namespaces: policyNamespaces(), Nodes: policyNodes()}
			_, sts := TranslateAllPolicies(in)
			for _, s := range sts {
				if !s.Accepted {
					t.Errorf("%s not accepted: %s", s.Name, s.Message)
				}
			}
			checkPolicyConns(t, in, c.conns, 0)
		})
	}
}

// TestClusterPolicyErrors: a policy with a bad field is refused whole,
// its status naming the field, and the others apply; shared priorities
// and what xlane does not enforce are said in the status of an accepted
// policy.
func TestClusterPolicyErrors(t *testing.T) {
	good := newCNP("good", CNPTierAdmin, 3, nsSubject(defaultNS), []CNPRule{{Action: CNPDeny, From: []CNPPeer{nsPeer(teamA)}}}, nil)
	bad := func(name string, mod func(*CNPSpec)) *ClusterNetworkPolicy {
		p := newCNP(name, CNPTierAdmin, 7, nsSubject(defaultNS), []CNPRule{
			{Action: CNPAccept, From: []CNPPeer{nsPeer(anyNS)}},
			{Action: CNPDeny, From: []CNPPeer{nsPeer(teamA)}},
		}, nil)
		mod(&p.Spec)
		return p
	}
	rng := &struct {
		Start int32 `json:"start"`
		End   int32 `json:"end"`
	}{9000, 8000}
	cases := []struct {
		p    *ClusterNetworkPolicy
		want string // the status message; accepted when it starts with "ok:"
	}{
		{bad("tier", func(s *CNPSpec) { s.Tier = "Developer" }), `spec.tier: "Developer": want Admin or Baseline`},
		{bad("prio", func(s *CNPSpec) { s.Priority = 1001 }), "spec.priority: 1001: want 0 (first) to 1000"},
		{bad("subject", func(s *CNPSpec) { s.Subject = CNPSubject{} }), "spec.subject: empty: want namespaces or pods"},
		{bad("selector", func(s *CNPSpec) {
			s.Ingress[1].From[0].Namespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
		}), `spec.ingress[1].from[0].namespaces: "Near" is not a valid label selector operator`},
		{bad("action", func(s *CNPSpec) { s.Ingress[1].Action = "Allow" }), `spec.ingress[1].action: "Allow": want Accept, Deny or Pass`},
		{bad("range", func(s *CNPSpec) {
			s.Ingress[1].Protocols = []CNPProtocol{{TCP: &CNPPorts{DestinationPort: &CNPPort{Range: rng}}}}
		}), "spec.ingress[1].protocols[0].tcp.destinationPort.range: 9000-8000: want 1 <= start < end <= 65535"},
		{bad("cidr", func(s *CNPSpec) {
			s.Ingress = nil
			s.Egress = []CNPRule{{Action: CNPDeny, To: []CNPPeer{{Networks: []string{"10.1.2.3/8"}}}}}
		}), `spec.egress[0].to[0].networks[0]: "10.1.2.3/8": want a CIDR without host bits`},
		{bad("ingress-nodes", func(s *CNPSpec) {
			s.Ingress[0].From = []CNPPeer{{Nodes: &metav1.LabelSelector{}}}
		}), "spec.ingress[0].from[0]: nodes, networks and domainNames are egress peers"},
		{bad("domain-deny", func(s *CNPSpec) {
			s.Ingress = nil
			s.Egress = []CNPRule{{Action: CNPDeny, To: []CNPPeer{{DomainNames: []string{"*.example.com"}}}}}
		}), "spec.egress[0].to: domainNames: only in Accept rules"},
		{bad("no-peers", func(s *CNPSpec) { s.Ingress[0].From = nil }), "spec.ingress[0].from: empty: a rule needs at least one peer"},
		{bad("too-many", func(s *CNPSpec) {
			for len(s.Ingress) < 26 {
				s.Ingress = append(s.Ingress, s.Ingress[0])
			}
		}), "spec.ingress: 26 rules: at most 25"},
		{bad("two-protocols", func(s *CNPSpec) {
			s.Ingress[0].Protocols = []CNPProtocol{{TCP: &CNPPorts{}, UDP: &CNPPorts{}}}
		}), "spec.ingress[0].protocols[0]: want exactly one of tcp, udp, sctp, destinationNamedPort"},
		{bad("sctp", func(s *CNPSpec) {
			s.Ingress[0].Protocols = []CNPProtocol{{SCTP: &CNPPorts{DestinationPort: &CNPPort{Number: 9}}}}
		}), "ok:spec.ingress[0].protocols[0].sctp.destinationPort: SCTP ports are not matched"},
		{bad("domain-accept", func(s *CNPSpec) {
			s.Egress = []CNPRule{{Action: CNPAccept, To: []CNPPeer{{DomainNames: []string{"*.example.com"}}}}}
		}), "ok:"},
		{bad("domain-bad", func(s *CNPSpec) {
			s.Egress = []CNPRule{{Action: CNPAccept, To: []CNPPeer{{DomainNames: []string{"example.com", "*.*.example.com"}}}}}
		}), `spec.egress[0].to[0].domainNames[1]: "*.*.example.com": want a DNS name`},
		{newCNP("good-twin", CNPTierAdmin, 3, nsSubject(teamA), []CNPRule{{Action: CNPDeny, From: []CNPPeer{nsPeer(defaultNS)}}}, nil),
			"ok:spec.priority 3: shared in tier Admin with good; xlane orders them by name"},
	}
	in := PolicyInput{ClusterPolicies: []*ClusterNetworkPolicy{good}, Pods: policyPods(), Namespaces: policyNamespaces(), NodeName: "n2"}
	for _, c := range cases {
		in.ClusterPolicies = append(in.ClusterPolicies, c.p)
	}
	got, sts := TranslateAllPolicies(in)
	byName := map[string]CNPStatus{}
	for _, s := range sts {
		byName[s.Name] = s
	}
	if s := byName["good"]; !s.Accepted || !strings.Contains(s.Message, "shared in tier Admin with good-twin") {
		t.Errorf("good: %+v", s)
	}
	for _, c := range cases {
		s := byName[c.p.Name]
		want, ok := strings.CutPrefix(c.want, "ok:")
		if s.Accepted != ok || !strings.Contains(s.Message, want) {
			t.Errorf("%s: accepted %v %q, want accepted %v %q", c.p.Name, s.Accepted, s.Message, ok, want)
		}
		if !ok {
			for _, r := range got {
				if strings.Contains(r.Name, ":"+c.p.Name+".") {
					t.Errorf("%s refused, yet its rule %s is there", c.p.Name, r.Name)
				}
			}
		}
	}
	if _, err := firewall.Validate(&rules.RuleSet{Rules: got}, firewall.MapResolver{}); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

// TestClusterPolicyScale: 1,000 ClusterNetworkPolicies (both tiers, each
// priority once per tier, an ingress and an egress rule each) translate
// and validate into one rule set within the firewall's limits.
func TestClusterPolicyScale(t *testing.T) {
	var cnps []*ClusterNetworkPolicy
	for i := range 1000 {
		tier := CNPTierAdmin
		if i%2 == 1 {
			tier = CNPTierBaseline
		}
		action := []string{CNPAccept, CNPDeny, CNPPass}[i%3]
		cnps = append(cnps, newCNP(fmt.Sprintf("p%04d", i), tier, int32(i/2), nsSubject(defaultNS),
			[]CNPRule{{Action: action, From: []CNPPeer{nsPeer(teamA)}, Protocols: []CNPProtocol{tcpTo(int32(1 + i))}}},
			[]CNPRule{{Action: action, To: []CNPPeer{{Networks: []string{fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)}}}}}))
	}
	in := PolicyInput{ClusterPolicies: cnps, Pods: policyPods(), Namespaces: policyNamespaces(), NodeName: "n2"}
	start := time.Now()
	got, sts := TranslateAllPolicies(in)
	took := time.Since(start)
	for _, s := range sts {
		if !s.Accepted || s.Message != "" {
			t.Fatalf("%s: %+v", s.Name, s)
		}
	}
	pol, err := firewall.Validate(&rules.RuleSet{Rules: got}, firewall.MapResolver{})
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	// web and db on n2: 1,000 ingress and 1,000 egress rules (no
	// NetworkPolicy: no node rules).
	if len(pol.Rules) != 2000 {
		t.Errorf("%d rules, want 2000", len(pol.Rules))
	}
	t.Logf("1,000 policies: %d rules translated in %v", len(got), took)
}

// TestClusterPolicyDomainNames: an Admin Accept to domainNames before a
// Deny of all egress translates to a rule with dst_names from the subject
// pods (per protocol entry) before the deny, and the firewall's reference
// model allows a destination only where the pod resolved it for the
// names (Policy.Resolved stands for internal/fqdn's map).
func TestClusterPolicyDomainNames(t *testing.T) {
	p := newCNP("egress-allowlist", CNPTierAdmin, 5, nsSubject(defaultNS), nil, []CNPRule{
		{Name: "to example", Action: CNPAccept, To: []CNPPeer{{DomainNames: []string{"*.Example.com", "example.com."}}},
			Protocols: []CNPProtocol{tcpTo(443), {UDP: &CNPPorts{}}}},
		{Action: CNPDeny, To: []CNPPeer{{Networks: []string{"0.0.0.0/0", "::/0"}}}},
	})
	got, sts := TranslateAllPolicies(PolicyInput{ClusterPolicies: []*ClusterNetworkPolicy{p}, Pods: policyPods(), Namespaces: policyNamespaces(), NodeName: "n2"})
	if len(sts) != 1 || !sts[0].Accepted || sts[0].Message != "" {
		t.Fatalf("statuses: %+v", sts)
	}
	var names []rules.Rule
	for _, r := range got {
		if r.DstNames != nil {
			names = append(names, r)
		}
	}
	if len(names) != 2 {
		t.Fatalf("%d rules with dst_names, want 2 (tcp 443, udp): %+v", len(names), got)
	}
	for _, r := range names {
		if r.Direction != "from-endpoint" || r.Action != "allow" || r.Dst != nil ||
			strings.Join(r.DstNames, ",") != "*.example.com,example.com" || strings.Join(r.Src, ",") != "10.244.2.20,fd00:244:0:2::20,10.244.2.10,fd00:244:0:2::10" {
			t.Errorf("rule %s: %+v", r.Name, r)
		}
	}
	pol, err := firewall.Validate(&rules.RuleSet{Rules: got}, firewall.MapResolver{})
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	web, api := mustAddr("10.244.2.10"), mustAddr("93.184.215.14")
	resolved := false
	pol.Resolved = func(i int, src, dst netip.Addr) bool { return resolved && src == web && dst == api }
	for _, c := range []struct {
		resolved bool
		dport    uint32
		want     string // the deciding rule's name suffix
	}{
		{false, 443, "eg1"}, // not resolved: the deny
		{true, 443, "eg0.0.dns"},
		{true, 80, "eg1"}, // resolved, another port
	} {
		resolved = c.resolved
		i, _ := pol.Evaluate(firewall.Packet{Kind: firewall.KindFromEP, Src: web, Dst: api, Proto: 6, SPort: 40000, DPort: c.dport})
		if i < 0 || !strings.HasSuffix(pol.Rules[i].Name, c.want) {
			name := "none"
			if i >= 0 {
				name = pol.Rules[i].Name
			}
			t.Errorf("resolved %v, port %d: decided by %s, want *%s", c.resolved, c.dport, name, c.want)
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
