package k8s

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlane-dev/xlane/internal/cnp"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// PolicyPrefix starts the name of every firewall rule this package
// programs from NetworkPolicies: the controller owns those rules and no
// other.
const PolicyPrefix = "k8s.np."

// Priorities of the rules of NetworkPolicies: after the rules an
// administrator gives without a priority (1000), the allowances of every
// policy before the isolation (deny) of any, so that policies add up (a
// connection any policy allows is allowed).
const (
	PolicyNodePriority  = 49999 // traffic between a pod and its own node
	PolicyAllowPriority = 50000
	PolicyDenyPriority  = 50001
)

// PolicyInput is what a policy sync translates.
type PolicyInput struct {
	Policies   []*networkingv1.NetworkPolicy
	Pods       []*corev1.Pod
	Namespaces []*corev1.Namespace
	// NodeName is this node: only its pods are isolated here (a pod's
	// ingress and egress are filtered on its own node). NodeAddrs are its
	// InternalIPs: traffic between a pod and its node is always allowed.
	NodeName  string
	NodeAddrs []netip.Addr
	// ClusterPolicies are the ClusterNetworkPolicies (cnp.go), Nodes the
	// cluster's Nodes (their nodes peers).
	ClusterPolicies []*ClusterNetworkPolicy
	Nodes           []*corev1.Node
}

// pod is a Pod as policies see it: its addresses, labels and named
// container ports (a workload of internal/cnp, which compiles the
// ClusterNetworkPolicies of the same pods).
type pod = cnp.Workload

// TranslatePolicies computes the firewall rules of the NetworkPolicies
// (sorted by name; an empty list when no policy selects a pod of this
// node). The rules are xlane's usual ones, on scope all, matching the
// selected pods by their addresses (to-endpoint: destination; from-endpoint:
// source); stateful (the rule set's `established` lets replies through):
//
//   - per policy and ingress rule i, `k8s.np.NS.NAME.inI[.J]`: allow, to
//     the selected pods, from the peers' addresses (pods by selector, ipBlock
//     prefixes with their except cut out), to the ports; a named port is
//     resolved in each selected pod (pods that resolve it differently get a
//     rule each, J); egress (`egI[.J]`) the same from the selected pods to
//     the peers, a named port resolved in each peer pod;
//   - per policy and direction it isolates, `k8s.np.NS.NAME.in-deny` /
//     `eg-deny`: drop the rest, after every policy's allowances;
//   - `k8s.np.node`: traffic between the selected pods and this node's
//     InternalIPs, allowed (as Kubernetes asks: probes).
//
// A peer list that selects nothing matches nothing (the rule is left out);
// SCTP ports are left out (the firewall matches TCP and UDP ports): a policy
// allowing only SCTP allows nothing.
func TranslatePolicies(in PolicyInput) []rules.Rule {
	out, _ := TranslateAllPolicies(in)
	return out
}

// TranslateAllPolicies is TranslatePolicies with the
// ClusterNetworkPolicies' statuses (their rules are among the rules).
func TranslateAllPolicies(in PolicyInput) ([]rules.Rule, []CNPStatus) {
	nsLabels := map[string]labels.Set{}
	for _, n := range in.Namespaces {
		nsLabels[n.Name] = labels.Set(n.Labels)
	}
	var pods []pod
	for _, p := range in.Pods {
		if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		pp := pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Labels: labels.Set(p.Labels)}
		ips := p.Status.PodIPs
		if len(ips) == 0 && p.Status.PodIP != "" {
			ips = []corev1.PodIP{{IP: p.Status.PodIP}}
		}
		for _, ip := range ips {
			if a, err := netip.ParseAddr(ip.IP); err == nil && !slices.Contains(pp.Addrs, a.Unmap()) {
				pp.Addrs = append(pp.Addrs, a.Unmap())
			}
		}
		if len(pp.Addrs) == 0 {
			continue
		}
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name != "" {
					pp.Ports = append(pp.Ports, cnp.NamedPort{Name: cp.Name, Proto: strings.ToLower(string(cmp.Or(cp.Protocol, corev1.ProtocolTCP))), Port: cp.ContainerPort})
				}
			}
		}
		pods = append(pods, pp)
	}
	slices.SortFunc(pods, func(a, b pod) int { return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name)) })

	var out []rules.Rule
	var selectedAll []netip.Addr
	for _, np := range in.Policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			continue // the API server validates selectors
		}
		var selected []pod
		for _, p := range pods {
			if p.Namespace == np.Namespace && p.Node == in.NodeName && sel.Matches(p.Labels) {
				selected = append(selected, p)
			}
		}
		if len(selected) == 0 {
			continue
		}
		ingress, egress := policyTypes(np)
		base := np.Namespace + "." + np.Name
		comment := "NetworkPolicy " + np.Namespace + "/" + np.Name
		if ingress {
			for i, r := range np.Spec.Ingress {
				out = append(out, directionRules(base, fmt.Sprintf("in%d", i), fmt.Sprintf("%s ingress[%d]", comment, i),
					true, selected, r.From, r.Ports, np.Namespace, pods, nsLabels)...)
			}
			out = append(out, denyRule(base, "in-deny", comment+": isolated for ingress", true, selected))
		}
		if egress {
			for i, r := range np.Spec.Egress {
				out = append(out, directionRules(base, fmt.Sprintf("eg%d", i), fmt.Sprintf("%s egress[%d]", comment, i),
					false, selected, r.To, r.Ports, np.Namespace, pods, nsLabels)...)
			}
			out = append(out, denyRule(base, "eg-deny", comment+": isolated for egress", false, selected))
		}
		for _, p := range selected {
			selectedAll = append(selectedAll, p.Addrs...)
		}
	}
	// The node rules are for the pods NetworkPolicies select (a
	// NetworkPolicy always lets a pod's node in and out), after the
	// Admin tier (which may deny the node: a nodes peer) and before the
	// Baseline tier.
	nodes := make([]cnp.Node, 0, len(in.Nodes))
	for _, n := range in.Nodes {
		cn := cnp.Node{Labels: labels.Set(n.Labels)}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				cn.Addrs = append(cn.Addrs, ip.Unmap())
			}
		}
		nodes = append(nodes, cn)
	}
	cnpRules, statuses := cnp.Compile(cnp.Input{Policies: in.ClusterPolicies, Workloads: pods, Namespaces: nsLabels,
		Nodes: nodes, NodeName: in.NodeName, Prefix: PolicyPrefix})
	if len(out) == 0 && len(cnpRules) == 0 {
		return nil, statuses
	}
	out = append(out, cnpRules...)
	slices.SortFunc(selectedAll, netip.Addr.Compare)
	selectedAll = slices.Compact(selectedAll)
	node, eps := cnp.AddrList(in.NodeAddrs), cnp.AddrList(selectedAll)
	if cnp.ShareFamily(node, eps) {
		out = append(out,
			rules.Rule{Name: PolicyPrefix + "node.in", Priority: PolicyNodePriority, Action: "allow", Direction: "to-endpoint",
				Src: node, Dst: eps, Comment: "NetworkPolicy: a pod's own node reaches it"},
			rules.Rule{Name: PolicyPrefix + "node.eg", Priority: PolicyNodePriority, Action: "allow", Direction: "from-endpoint",
				Src: eps, Dst: node, Comment: "NetworkPolicy: a pod reaches its own node"})
	}
	slices.SortFunc(out, func(a, b rules.Rule) int { return cmp.Compare(a.Name, b.Name) })
	return out, statuses
}

// policyTypes says which directions a policy isolates: policyTypes when
// given, else Ingress, and Egress when it has egress rules.
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

// directionRules translates one ingress (in) or egress rule of a policy.
func directionRules(base, suffix, comment string, in bool, selected []pod, peers []networkingv1.NetworkPolicyPeer,
	ports []networkingv1.NetworkPolicyPort, ns string, pods []pod, nsLabels map[string]labels.Set) []rules.Rule {
	peerPods, peerNets := resolvePeers(peers, ns, pods, nsLabels)
	anyPeer := len(peers) == 0
	if !anyPeer && len(peerPods) == 0 && len(peerNets) == 0 {
		return nil // selects nothing
	}

	// The ports, per protocol: numbers and ranges, or names resolved in
	// the pods on the receiving side (the selected pods for ingress, the
	// peer pods for egress).
	type portRule struct {
		proto string
		ports []string // nil: every port of proto
		recv  []pod    // nil: every receiver
		nets  bool     // the ipBlock peers too (not for a named port)
	}
	var prs []portRule
	receivers := selected
	if !in {
		receivers = peerPods
		if anyPeer {
			// No `to`: every pod of the cluster is a peer, and a
			// named port resolves in each.
			receivers = pods
		}
	}
	byProto := map[string][]string{}
	allPorts := map[string]bool{}
	var protos []string
	named := map[string]map[int32][]pod{} // proto -> port number -> receivers
	for _, p := range ports {
		proto := strings.ToLower(string(ptrOr(p.Protocol, corev1.ProtocolTCP)))
		if proto != "tcp" && proto != "udp" {
			continue // SCTP: the firewall matches ports of TCP and UDP only
		}
		if !slices.Contains(protos, proto) {
			protos = append(protos, proto)
		}
		switch {
		case p.Port == nil:
			allPorts[proto] = true
		case p.Port.Type == intstr.String:
			for _, r := range receivers {
				if n := r.PortNumber(p.Port.StrVal, proto); n != 0 {
					if named[proto] == nil {
						named[proto] = map[int32][]pod{}
					}
					named[proto][n] = append(named[proto][n], r)
				}
			}
		default:
			s := strconv.Itoa(int(p.Port.IntVal))
			if p.EndPort != nil && *p.EndPort > p.Port.IntVal {
				s += "-" + strconv.Itoa(int(*p.EndPort))
			}
			byProto[proto] = append(byProto[proto], s)
		}
	}
	if len(ports) > 0 && len(protos) == 0 {
		return nil // SCTP only
	}
	if len(ports) == 0 {
		prs = append(prs, portRule{nets: true})
	}
	for _, proto := range protos {
		if allPorts[proto] {
			prs = append(prs, portRule{proto: proto, nets: true})
			continue
		}
		if len(byProto[proto]) > 0 {
			prs = append(prs, portRule{proto: proto, ports: byProto[proto], nets: true})
		}
		nums := make([]int32, 0, len(named[proto]))
		for n := range named[proto] {
			nums = append(nums, n)
		}
		slices.Sort(nums)
		for _, n := range nums {
			prs = append(prs, portRule{proto: proto, ports: []string{strconv.Itoa(int(n))}, recv: named[proto][n], nets: in})
		}
	}

	var out []rules.Rule
	for j, pr := range prs {
		r := rules.Rule{Priority: PolicyAllowPriority, Action: "allow", Comment: comment}
		r.Name = policyRuleName(base, suffix)
		if len(prs) > 1 {
			r.Name = policyRuleName(base, fmt.Sprintf("%s.%d", suffix, j))
		}
		if pr.proto != "" {
			r.Proto = rules.List{pr.proto}
			r.DstPort = pr.ports
		}
		// An egress named port limits even "every destination" to the
		// pods that name it.
		restricted := !anyPeer || pr.recv != nil && !in
		var peerAddrs rules.List
		if restricted {
			cands := peerPods
			if anyPeer {
				cands = pr.recv
			}
			for _, p := range cands {
				if pr.recv != nil && !in && !slices.ContainsFunc(pr.recv, func(q pod) bool { return q.Namespace == p.Namespace && q.Name == p.Name }) {
					continue
				}
				peerAddrs = append(peerAddrs, cnp.AddrList(p.Addrs)...)
			}
			if pr.nets {
				for _, n := range peerNets {
					peerAddrs = append(peerAddrs, n.String())
				}
			}
			if len(peerAddrs) == 0 {
				continue
			}
		}
		var own rules.List
		for _, p := range selected {
			if pr.recv != nil && in && !slices.ContainsFunc(pr.recv, func(q pod) bool { return q.Namespace == p.Namespace && q.Name == p.Name }) {
				continue
			}
			own = append(own, cnp.AddrList(p.Addrs)...)
		}
		if len(own) == 0 {
			continue
		}
		if restricted && !cnp.ShareFamily(own, peerAddrs) {
			continue // e.g. IPv6 pods and an IPv4 ipBlock: nothing to match
		}
		if in {
			r.Direction, r.Dst, r.Src = "to-endpoint", own, peerAddrs
		} else {
			r.Direction, r.Src, r.Dst = "from-endpoint", own, peerAddrs
		}
		out = append(out, r)
	}
	return out
}

// resolvePeers returns the pods and prefixes of a rule's peers.
func resolvePeers(peers []networkingv1.NetworkPolicyPeer, ns string, pods []pod, nsLabels map[string]labels.Set) ([]pod, []netip.Prefix) {
	// The peers: nil is everyone.
	var peerPods []pod
	var peerNets []netip.Prefix
	for _, pe := range peers {
		switch {
		case pe.IPBlock != nil:
			cidr, err := netip.ParsePrefix(pe.IPBlock.CIDR)
			if err != nil {
				continue
			}
			var except []netip.Prefix
			for _, e := range pe.IPBlock.Except {
				if p, err := netip.ParsePrefix(e); err == nil {
					except = append(except, p.Masked())
				}
			}
			peerNets = append(peerNets, subtractPrefixes(cidr.Masked(), except)...)
		case pe.PodSelector != nil || pe.NamespaceSelector != nil:
			podSel, nsSel := labels.Everything(), labels.Selector(nil)
			var err error
			if pe.PodSelector != nil {
				if podSel, err = metav1.LabelSelectorAsSelector(pe.PodSelector); err != nil {
					continue
				}
			}
			if pe.NamespaceSelector != nil {
				if nsSel, err = metav1.LabelSelectorAsSelector(pe.NamespaceSelector); err != nil {
					continue
				}
			}
			for _, p := range pods {
				if nsSel == nil && p.Namespace != ns || nsSel != nil && !nsSel.Matches(nsLabels[p.Namespace]) {
					continue
				}
				if podSel.Matches(p.Labels) && !slices.ContainsFunc(peerPods, func(q pod) bool { return q.Namespace == p.Namespace && q.Name == p.Name }) {
					peerPods = append(peerPods, p)
				}
			}
		}
	}
	return peerPods, peerNets
}

// denyRule isolates the selected pods in one direction.
func denyRule(base, suffix, comment string, in bool, selected []pod) rules.Rule {
	var own rules.List
	for _, p := range selected {
		own = append(own, cnp.AddrList(p.Addrs)...)
	}
	r := rules.Rule{Name: policyRuleName(base, suffix), Priority: PolicyDenyPriority, Action: "drop", Comment: comment}
	if in {
		r.Direction, r.Dst = "to-endpoint", own
	} else {
		r.Direction, r.Src = "from-endpoint", own
	}
	return r
}

// policyRuleName is PolicyPrefix + NS.NAME.SUFFIX within the firewall's
// 64 characters (cnp.RuleName).
func policyRuleName(base, suffix string) string { return cnp.RuleName(PolicyPrefix, base, suffix) }

// subtractPrefixes returns p without the prefixes of except, as a list of
// disjoint prefixes (an ipBlock's cidr less its except).
func subtractPrefixes(p netip.Prefix, except []netip.Prefix) []netip.Prefix {
	overlaps := false
	for _, e := range except {
		if e.Addr().Is4() != p.Addr().Is4() {
			continue
		}
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return nil // all of p is excepted
		}
		if e.Bits() > p.Bits() && p.Contains(e.Addr()) {
			overlaps = true
		}
	}
	if !overlaps {
		return []netip.Prefix{p}
	}
	lo, hi := halves(p)
	return append(subtractPrefixes(lo, except), subtractPrefixes(hi, except)...)
}

// halves splits p into its two prefixes one bit longer.
func halves(p netip.Prefix) (lo, hi netip.Prefix) {
	b := p.Addr().AsSlice()
	bit := p.Bits()
	b[bit/8] |= 0x80 >> (bit % 8)
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(p.Addr(), bit+1), netip.PrefixFrom(a, bit+1)
}
