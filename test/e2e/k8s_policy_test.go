package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/k8s"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestKubernetesNetworkPolicy: NetworkPolicies created with client-go in a
// real kube-apiserver become each node's firewall rules (xlaned
// --kubernetes with deploy/kubernetes/rbac.yaml's identity), and real TCP
// between pods (namespaces with xlane endpoints, described by Pod objects
// with their addresses, labels and container ports) is blocked and
// allowed as they say, IPv4 and IPv6, on one node and across nodes; the
// rules' counters carry the policy's name.
//
//	client (team-a)  other (default)      web (default: http 8080, 9090)
//	        \          /                    |
//	         node n1 (10.244.1/24)        node n2 (10.244.2/24)
//	           | ul0                        | ul0
//	           +------------ br0 -----------+---- cp: etcd + kube-apiserver
func TestKubernetesNetworkPolicy(t *testing.T) {
	bins := k8sBins(t, "kube-apiserver", "xlane-etcd")
	ul := newNetns(t, "ul")
	runIn(t, ul, "ip", "link", "add", "br0", "type", "bridge")
	runIn(t, ul, "ip", "link", "set", "br0", "up")
	attach := func(netns, port string, addrs ...string) {
		run(t, "ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", netns)
		run(t, "ip", "-n", ul, "link", "set", port, "master", "br0", "up")
		for _, a := range addrs {
			runIn(t, netns, "ip", "addr", "add", a, "dev", "ul0", "nodad")
		}
		runIn(t, netns, "ip", "link", "set", "ul0", "up")
		runIn(t, netns, "ip", "link", "set", "lo", "up")
	}
	cpNS := newNetns(t, "cp")
	attach(cpNS, "pcp", "192.168.78.100/24")
	cp := startControlPlane(t, bins, cpNS, "192.168.78.100")
	ctx := context.Background()

	var nodes []*node
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("n%d", i)
		v4, v6 := fmt.Sprintf("192.168.78.%d", i), fmt.Sprintf("fd00:78::%d", i)
		n, err := cp.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", i),
				PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i), fmt.Sprintf("fd00:244:0:%d::/64", i)}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create node: %v", err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: v4}, {Type: corev1.NodeInternalIP, Address: v6}}
		if _, err := cp.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("node status: %v", err)
		}
		nodes = append(nodes, newNode(t, func(n *node) {
			attach(n.netns, fmt.Sprintf("p%d", i), v4+"/24", v6+"/64")
			n.flags = append(n.flags, "--kubernetes", "--kubeconfig", cp.kubeconfig, "--node-name", name,
				"--cluster-cidr", "10.244.0.0/16,fd00:244::/48", "--uplink", "ul0")
		}))
	}
	for i, n := range nodes {
		waitFor(t, 30*time.Second, fmt.Sprintf("n%d: both Nodes as xlane nodes", i+1), func() bool {
			var got []model.Node
			n.mustXlane(&got, "node", "ls")
			return len(got) == 2
		})
		n.mustXlane(nil, "network", "create", "pods", "--mode", "tc")
	}

	// The pods: an endpoint each, and its Pod object as the kubelet would
	// leave it (node, addresses, running).
	if _, err := cp.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a",
		Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	type k8sPod struct {
		netns string
		ips   []netip.Addr // IPv4, IPv6
	}
	newPod := func(n *node, nodeName, namespace, name string, labels map[string]string, ports ...corev1.ContainerPort) *k8sPod {
		p := &k8sPod{netns: newNetns(t, "pod")}
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "pods", "--netns", p.netns)
		p.ips = ep.IPs
		if len(p.ips) != 2 || !p.ips[0].Is4() || !p.ips[1].Is6() {
			t.Fatalf("endpoint %s: addresses %v, want IPv4 and IPv6", name, p.ips)
		}
		pod, err := cp.cs.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "xlane-e2e", Ports: ports}}}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.ips[0].String(),
			PodIPs: []corev1.PodIP{{IP: p.ips[0].String()}, {IP: p.ips[1].String()}}}
		if _, err := cp.cs.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("pod %s status: %v", name, err)
		}
		return p
	}
	client := newPod(nodes[0], "n1", "team-a", "client", map[string]string{"app": "client"})
	other := newPod(nodes[0], "n1", "default", "other", map[string]string{"app": "other"})
	web := newPod(nodes[1], "n2", "default", "web", map[string]string{"app": "web"},
		corev1.ContainerPort{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP})
	for _, ip := range web.ips {
		startNameServer(t, web.netns, "web", netip.AddrPortFrom(ip, 8080))
		startNameServer(t, web.netns, "web-9090", netip.AddrPortFrom(ip, 9090))
	}
	for _, ip := range other.ips {
		startNameServer(t, other.netns, "other", netip.AddrPortFrom(ip, 8080))
	}

	// check dials every case, IPv4 and IPv6; allowed ones must get the
	// server's greeting, blocked ones must not connect.
	type tcase struct {
		from  *k8sPod
		to    *k8sPod
		port  uint16
		allow bool
		what  string
	}
	check := func(t *testing.T, cases ...tcase) {
		t.Helper()
		for _, c := range cases {
			for fam := range 2 {
				dst := netip.AddrPortFrom(c.to.ips[fam], c.port)
				err := policyDial(c.from.netns, dst)
				if c.allow && err != nil {
					t.Errorf("%s (%s): %v, want it allowed", c.what, dst, err)
				}
				if !c.allow && err == nil {
					t.Errorf("%s (%s): connected, want it blocked", c.what, dst)
				}
			}
		}
	}
	check(t, tcase{client, web, 8080, true, "no policy: client to web"}, tcase{other, web, 8080, true, "no policy: other to web"})

	// Masquerade: a pod reaching a host off the cluster (on the nodes'
	// underlay, no route to the pod CIDRs) is seen with its node's
	// address; pods between themselves keep theirs (the policies below
	// match them by it).
	t.Run("masquerade to a host off the cluster", func(t *testing.T) {
		ext := newNetns(t, "ext")
		attach(ext, "pext", "192.168.78.50/24", "fd00:78::50/64")
		for _, c := range []struct {
			pod  *k8sPod
			node []string
		}{{client, []string{"192.168.78.1", "fd00:78::1"}}, {web, []string{"192.168.78.2", "fd00:78::2"}}} {
			for fam, dst := range []string{"192.168.78.50:7070", "[fd00:78::50]:7070"} {
				if got := peerSeen(t, c.pod.netns, ext, netip.MustParseAddrPort(dst)); got.String() != c.node[fam] {
					t.Errorf("pod %v to %s: seen as %s, want its node's %s", c.pod.ips[fam], dst, got, c.node[fam])
				}
			}
		}
		for fam := range 2 {
			dst := netip.AddrPortFrom(web.ips[fam], 7070)
			if got := peerSeen(t, client.netns, web.netns, dst); got != client.ips[fam] {
				t.Errorf("client to web %s: seen as %s, want the pod's own %s", dst, got, client.ips[fam])
			}
		}
	})

	rules := func(n *node) map[string]api.FirewallRule {
		var fw api.Firewall
		n.mustXlane(&fw, "fw", "ls")
		out := map[string]api.FirewallRule{}
		for _, r := range fw.Rules {
			if strings.HasPrefix(r.Name, "k8s.np.") {
				out[r.Name] = r
			}
		}
		return out
	}
	waitRules := func(n *node, what string, want ...string) map[string]api.FirewallRule {
		t.Helper()
		var got map[string]api.FirewallRule
		waitFor(t, 15*time.Second, what, func() bool {
			got = rules(n)
			for _, w := range want {
				if _, ok := got[w]; !ok {
					return false
				}
			}
			return true
		})
		return got
	}
	tcp := func(p intstr.IntOrString, end int32) networkingv1.NetworkPolicyPort {
		np := networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: &p}
		if end != 0 {
			np.EndPort = &end
		}
		return np
	}
	createPolicy := func(np *networkingv1.NetworkPolicy) {
		t.Helper()
		if _, err := cp.cs.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create NetworkPolicy %s: %v", np.Name, err)
		}
	}

	t.Run("ingress: namespace and pod selector, named port", func(t *testing.T) {
		start := time.Now()
		createPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-http"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{tcp(intstr.FromString("http"), 0)}}}}})
		waitRules(nodes[1], "n2: web-http's rules", "k8s.np.default.web-http.in0", "k8s.np.default.web-http.in-deny")
		t.Logf("web-http on n2 %v after its creation", time.Since(start).Round(time.Millisecond))
		if r := rules(nodes[0]); len(r) != 0 {
			t.Errorf("n1 has policy rules %v: it runs no selected pod", r)
		}
		check(t,
			tcase{client, web, 8080, true, "client (team-a, app=client) to web's http"},
			tcase{client, web, 9090, false, "client to web's 9090 (not in the policy)"},
			tcase{other, web, 8080, false, "other (default) to web's http"})
		r := rules(nodes[1])
		// Allowed: 2 connections (one per family), at least their SYNs
		// (the rest is established). Dropped: SYNs and their retries.
		if p := r["k8s.np.default.web-http.in0"].Packets; p < 2 {
			t.Errorf("k8s.np.default.web-http.in0: %d packets, want the 2 SYNs it allowed", p)
		}
		if p := r["k8s.np.default.web-http.in-deny"].Packets; p < 4 {
			t.Errorf("k8s.np.default.web-http.in-deny: %d packets, want at least the 4 SYNs it dropped", p)
		}
		for _, name := range []string{"k8s.np.default.web-http.in0", "k8s.np.default.web-http.in-deny"} {
			if c := r[name].Comment; !strings.Contains(c, "NetworkPolicy default/web-http") {
				t.Errorf("%s: comment %q does not name the policy", name, c)
			}
		}
	})

	t.Run("egress: ipBlock with except, port range; policies OR-ed", func(t *testing.T) {
		createPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "client-out"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{
					{To: []networkingv1.NetworkPolicyPeer{
						{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{"10.244.2.0/24"}}},
						{IPBlock: &networkingv1.IPBlock{CIDR: "fd00:244::/48", Except: []string{"fd00:244:0:2::/64"}}}},
						Ports: []networkingv1.NetworkPolicyPort{tcp(intstr.FromInt(8080), 0)}},
					{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
						Ports: []networkingv1.NetworkPolicyPort{tcp(intstr.FromInt(9000), 9100)}}}}})
		createPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-bulk"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
					Ports: []networkingv1.NetworkPolicyPort{tcp(intstr.FromInt(9090), 0)}}}}})
		waitRules(nodes[0], "n1: client-out's rules", "k8s.np.team-a.client-out.eg0", "k8s.np.team-a.client-out.eg1", "k8s.np.team-a.client-out.eg-deny")
		waitRules(nodes[1], "n2: web-bulk's rules", "k8s.np.default.web-bulk.in0")
		check(t,
			tcase{client, other, 8080, true, "client to other:8080 (in the ipBlock, same node)"},
			tcase{client, web, 8080, false, "client to web:8080 (web's CIDR is excepted)"},
			tcase{client, web, 9090, true, "client to web:9090 (egress 9000-9100 to app=web; web-bulk lets it in)"},
			tcase{other, web, 9090, true, "other to web:9090 (web-bulk)"},
			tcase{other, web, 8080, false, "other to web:8080 (neither web policy)"})
		r := rules(nodes[0])
		if p := r["k8s.np.team-a.client-out.eg-deny"].Packets; p < 2 {
			t.Errorf("k8s.np.team-a.client-out.eg-deny: %d packets, want the SYNs to web:8080", p)
		}
		if p := r["k8s.np.team-a.client-out.eg0"].Packets; p < 2 {
			t.Errorf("k8s.np.team-a.client-out.eg0: %d packets, want the SYNs to other:8080", p)
		}
		if p := r["k8s.np.team-a.client-out.eg1"].Packets; p < 2 {
			t.Errorf("k8s.np.team-a.client-out.eg1: %d packets, want the SYNs to web:9090", p)
		}
		if p := rules(nodes[1])["k8s.np.default.web-bulk.in0"].Packets; p < 4 {
			t.Errorf("k8s.np.default.web-bulk.in0: %d packets, want the 4 SYNs to 9090", p)
		}
	})

	t.Run("egress through ClusterIPs", func(t *testing.T) {
		// client-out lets client reach app=web at 9000-9100: a Service
		// whose backend is web:9090 is allowed at its ClusterIP and port,
		// one to web:8080 is not: egress is judged on the backend, after
		// the DNAT (docs/kubernetes.md), by the rule that allows web:9090.
		vipOf := func(name string, target int32, be *k8sPod, beNode string) netip.AddrPort {
			s, err := cp.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt(int(target))}}}},
				metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create service %s: %v", name, err)
			}
			if _, err := cp.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(target)}},
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{be.ips[0].String()}, NodeName: ptr.To(beNode)}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create endpointslice %s: %v", name, err)
			}
			waitService(t, nodes[0], "k8s.default."+name+".tcp80.c0", 1)
			return netip.AddrPortFrom(netip.MustParseAddr(s.Spec.ClusterIP), 80)
		}
		vip := func(name string, target int32) netip.AddrPort { return vipOf(name, target, web, "n2") }
		bulk, http := vip("web-bulk", 9090), vip("web-http", 8080)
		before := rules(nodes[0])["k8s.np.team-a.client-out.eg1"].Packets
		if err := policyDial(client.netns, bulk); err != nil {
			t.Errorf("client to web-bulk's ClusterIP %s: %v, want it allowed", bulk, err)
		}
		if err := policyDial(client.netns, http); err == nil {
			t.Errorf("client to web-http's ClusterIP %s: connected, want it blocked", http)
		}
		if err := policyDial(other.netns, bulk); err != nil {
			t.Errorf("other (not isolated) to web-bulk's ClusterIP %s: %v", bulk, err)
		}
		// web is isolated for ingress (web-http, web-bulk): its own
		// connection to a ClusterIP whose backend is on the other node
		// gets its answer, translated back to come from the VIP.
		otherVIP := vipOf("other-http", 8080, other, "n1")
		waitService(t, nodes[1], "k8s.default.other-http.tcp80.c0", 1)
		if err := policyDial(web.netns, otherVIP); err != nil {
			t.Errorf("web (ingress-isolated, n2) to other's ClusterIP %s (backend on n1): %v, want the reply let in", otherVIP, err)
		}
		if p := rules(nodes[0])["k8s.np.team-a.client-out.eg1"].Packets; p <= before {
			t.Errorf("k8s.np.team-a.client-out.eg1: %d packets, was %d: want the SYN to %s judged on its backend", p, before, bulk)
		}
	})

	t.Run("a user's rule set keeps the policies' rules", func(t *testing.T) {
		// xlane fw apply of a file without them: they stay, the user's
		// rule is added.
		f := t.TempDir() + "/rules.yaml"
		writeFile(t, f, []byte("rules:\n  - {name: mine, direction: to-endpoint, proto: udp, dport: 9, action: drop}\n"))
		nodes[1].mustXlane(nil, "fw", "apply", f)
		if r := rules(nodes[1]); len(r) == 0 {
			t.Errorf("n2: the policies' rules are gone after xlane fw apply")
		}
		if _, e, err := nodes[1].xlane("fw", "rm", "k8s.np.default.web-http.in0"); err == nil || !strings.Contains(e, "NetworkPolicies") {
			t.Errorf("xlane fw rm of a policy's rule: %v %s, want it refused", err, e)
		}
		check(t, tcase{other, web, 8080, false, "other to web:8080 after a user's apply"})
	})

	t.Run("policies deleted", func(t *testing.T) {
		for _, p := range [][2]string{{"default", "web-http"}, {"default", "web-bulk"}, {"team-a", "client-out"}} {
			if err := cp.cs.NetworkingV1().NetworkPolicies(p[0]).Delete(ctx, p[1], metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for i, n := range nodes {
			waitFor(t, 15*time.Second, fmt.Sprintf("n%d: no policy rule left", i+1), func() bool { return len(rules(n)) == 0 })
		}
		check(t, tcase{other, web, 8080, true, "other to web:8080, no policy"}, tcase{client, web, 8080, true, "client to web:8080, no policy"})
	})

	// ClusterNetworkPolicies (k8s_cnp_test.go): the CRD installed in the
	// API server, the Admin tier before a NetworkPolicy, the Baseline
	// tier after it, Pass between them.
	t.Run("ClusterNetworkPolicy tiers", func(t *testing.T) {
		installCNPCRD(t, cp)
		createPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-from-team-a"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}}}}})
		createCNP(t, cp, `
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: admin-web}
spec:
  tier: Admin
  priority: 10
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}}
  ingress:
  - {name: no-9090, action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 9090}}}]}
  - {name: team-a-to-networkpolicy, action: Pass, from: [{namespaces: {matchLabels: {team: a}}}]}
  - {name: nobody-else, action: Deny, from: [{namespaces: {}}]}
`)
		createCNP(t, cp, `
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: baseline-default}
spec:
  tier: Baseline
  priority: 0
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: default}}}
  ingress:
  - {name: no-team-a, action: Deny, from: [{namespaces: {matchLabels: {team: a}}}]}
`)
		waitRules(nodes[1], "n2: the tiers' rules", "k8s.np.admin:admin-web.in0", "k8s.np.admin:admin-web.in1", "k8s.np.admin:admin-web.in2",
			"k8s.np.default.web-from-team-a.in0")
		waitRules(nodes[0], "n1: the baseline's rule", "k8s.np.baseline:baseline-default.in0")
		check(t,
			tcase{client, web, 8080, true, "client (team-a) to web:8080: Admin Pass, the NetworkPolicy allows"},
			tcase{client, web, 9090, false, "client to web:9090: the Admin Deny before the NetworkPolicy's allowance"},
			tcase{other, web, 8080, false, "other (default) to web:8080: the Admin tier's last rule"},
			tcase{client, other, 8080, false, "client to other:8080: no NetworkPolicy selects other: the Baseline Deny"})
		r2, r1 := rules(nodes[1]), rules(nodes[0])
		for name, min := range map[string]uint64{"k8s.np.admin:admin-web.in0": 2, "k8s.np.admin:admin-web.in1": 2, "k8s.np.admin:admin-web.in2": 2,
			"k8s.np.default.web-from-team-a.in0": 2} {
			if p := r2[name].Packets; p < min {
				t.Errorf("n2 %s: %d packets, want at least %d", name, p, min)
			}
		}
		if p := r1["k8s.np.baseline:baseline-default.in0"].Packets; p < 2 {
			t.Errorf("n1 k8s.np.baseline:baseline-default.in0: %d packets, want the SYNs it dropped", p)
		}
		if c := r2["k8s.np.admin:admin-web.in1"].Comment; !strings.Contains(c, `ClusterNetworkPolicy admin-web tier Admin priority 10 ingress[1] "team-a-to-networkpolicy"`) {
			t.Errorf("comment %q does not name the policy, tier and rule", c)
		}
		for _, name := range []string{"admin-web", "baseline-default"} {
			waitFor(t, 15*time.Second, name+"'s condition", func() bool { s, _ := cnpCondition(t, cp, name); return s == "True" })
		}
		// Deleted: the rules go, the traffic flows again.
		for _, name := range []string{"admin-web", "baseline-default"} {
			if err := cp.dyn.Resource(k8s.CNPResource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cp.cs.NetworkingV1().NetworkPolicies("default").Delete(ctx, "web-from-team-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for i, n := range nodes {
			waitFor(t, 15*time.Second, fmt.Sprintf("n%d: no policy rule left", i+1), func() bool { return len(rules(n)) == 0 })
		}
		check(t, tcase{client, other, 8080, true, "client to other:8080, no policy"}, tcase{other, web, 9090, true, "other to web:9090, no policy"})
	})

	// domainNames (FQDN egress) on the same cluster: a CoreDNS pod
	// (kube-system, k8s-app=kube-dns; the binary built from its Go
	// module) answers web.example.test with web's addresses; an Admin
	// allowlist lets team-a reach DNS and, by name, web:8080, and denies
	// the rest. The client (n1) is denied web (n2) by address until it
	// resolves the name, IPv4 (A) and IPv6 (AAAA), each family's answer
	// allowing that family's address; other is never allowed.
	t.Run("ClusterNetworkPolicy domainNames", func(t *testing.T) {
		coredns := corednsBinary(t)
		installCNPCRD(t, cp)
		dnsPod := newPod(nodes[0], "n1", "kube-system", "coredns", map[string]string{"k8s-app": "kube-dns"})
		startCoreDNS(t, coredns, dnsPod.netns, fmt.Sprintf(".:53 {\n    hosts {\n        %s web.example.test\n        %s web.example.test\n        ttl 60\n    }\n}\n",
			web.ips[0], web.ips[1]))
		waitFor(t, 10*time.Second, "coredns answers", func() bool {
			_, err := dnsResolve(client.netns, dnsPod.ips[0], "web.example.test.")
			return err == nil
		})
		createCNP(t, cp, `
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: egress-allowlist}
spec:
  tier: Admin
  priority: 5
  subject: {namespaces: {matchLabels: {team: a}}}
  egress:
  - {name: dns, action: Accept, to: [{pods: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: kube-dns}}}}], protocols: [{udp: {destinationPort: {number: 53}}}]}
  - {name: web-by-name, action: Accept, to: [{domainNames: [web.example.test]}], protocols: [{tcp: {destinationPort: {number: 8080}}}]}
  - {name: nothing-else, action: Deny, to: [{networks: ["0.0.0.0/0", "::/0"]}]}
`)
		got := waitRules(nodes[0], "n1: the allowlist's rules", "k8s.np.admin:egress-allowlist.eg0", "k8s.np.admin:egress-allowlist.eg1.dns",
			"k8s.np.admin:egress-allowlist.eg2")
		if names := got["k8s.np.admin:egress-allowlist.eg1.dns"].DstNames; len(names) != 1 || names[0] != "web.example.test" {
			t.Errorf("eg1.dns dst_names %v, want [web.example.test]", names)
		}
		waitFor(t, 15*time.Second, "egress-allowlist's condition", func() bool { s, _ := cnpCondition(t, cp, "egress-allowlist"); return s == "True" })
		time.Sleep(1500 * time.Millisecond) // the DNS taps open within a second
		for fam, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			dst := netip.AddrPortFrom(web.ips[fam], 8080)
			if err := policyDial(client.netns, dst); err == nil {
				t.Errorf("client to web %s before resolving web.example.test: connected, want denied by address", dst)
			}
			addrs, err := dnsResolveType(client.netns, dnsPod.ips[fam], "web.example.test.", typ)
			if err != nil || len(addrs) != 1 || addrs[0] != web.ips[fam] {
				t.Fatalf("client resolves web.example.test (%v) through CoreDNS: %v %v, want %v", typ, addrs, err, web.ips[fam])
			}
			if err := policyDial(client.netns, dst); err != nil {
				t.Errorf("client to web %s after resolving web.example.test: %v, want allowed by name", dst, err)
			}
		}
		check(t, tcase{client, other, 8080, false, "client to other:8080: not resolved, the allowlist's Deny"})
		if p := rules(nodes[0])["k8s.np.admin:egress-allowlist.eg1.dns"].Packets; p < 2 {
			t.Errorf("n1 eg1.dns: %d packets, want the two connections it allowed", p)
		}
		if err := cp.dyn.Resource(k8s.CNPResource).Delete(ctx, "egress-allowlist", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "n1: no policy rule left", func() bool { return len(rules(nodes[0])) == 0 })
		check(t, tcase{client, other, 8080, true, "client to other:8080, no policy"})
	})
}

// policyDial connects from netns to dst and reads the server's greeting.
func policyDial(netns string, dst netip.AddrPort) error {
	var c net.Conn
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", dst.String(), 1500*time.Millisecond)
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	l, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read the greeting: %w", err)
	}
	if l == "" {
		return fmt.Errorf("no greeting")
	}
	return nil
}
