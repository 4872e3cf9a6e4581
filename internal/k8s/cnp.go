package k8s

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/fqdn"
)

// Priorities of ClusterNetworkPolicy rules in the firewall, around the
// NetworkPolicy tier (PolicyNodePriority to PolicyDenyPriority): the
// Admin tier before it, the Baseline tier after it. A rule's priority is
// its tier's base + the policy's priority (0-1000) × CNPRuleSlots + the
// rule's index (0-24, the order written), so that a lower priority and an
// earlier rule come first; policies of one priority follow each other by
// name (the API leaves their order to the implementation).
const (
	CNPAdminBase    = 10000 // Admin: 10000-42024
	CNPBaselineBase = 60000 // Baseline: 60000-92024
	// An Admin Pass goes on at the NetworkPolicy tier; a Baseline Pass
	// past every tier: what no tier decides is allowed (the rules and
	// defaults of the node's own set after that still apply).
	CNPAdminPassTo    = PolicyNodePriority
	CNPBaselinePassTo = 99999
	CNPRuleSlots      = 32
	cnpMaxRules       = 25 // rules per direction, peers and protocols per rule (the API's MaxItems)
)

// CNPStatus is what the translation says of one ClusterNetworkPolicy:
// Accepted, or the field that keeps it out (then none of its rules is
// programmed), and warnings about what it asks that xlane does not do.
type CNPStatus struct {
	Name     string
	Accepted bool
	Message  string // the error; or the warnings, "; "-joined
}

// cnpError names the field of a policy that is wrong.
type cnpError struct{ field, msg string }

func (e *cnpError) Error() string { return e.field + ": " + e.msg }

func cnpErrf(field, format string, args ...any) error {
	return &cnpError{field, fmt.Sprintf(format, args...)}
}

// translateCluster computes the rules of the ClusterNetworkPolicies
// (in.ClusterPolicies) for the pods of this node and the statuses of
// every policy.
func translateCluster(in PolicyInput, pods []pod, nsLabels map[string]labels.Set) ([]rules.Rule, []CNPStatus) {
	var out []rules.Rule
	var sts []CNPStatus
	byPrio := map[string][]string{} // tier/priority -> names
	cnps := slices.Clone(in.ClusterPolicies)
	slices.SortFunc(cnps, func(a, b *ClusterNetworkPolicy) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range cnps {
		rs, warn, err := translateCNP(p, in, pods, nsLabels)
		if err != nil {
			sts = append(sts, CNPStatus{Name: p.Name, Message: err.Error()})
			continue
		}
		k := p.Spec.Tier + "/" + strconv.Itoa(int(p.Spec.Priority))
		byPrio[k] = append(byPrio[k], p.Name)
		sts = append(sts, CNPStatus{Name: p.Name, Accepted: true, Message: strings.Join(warn, "; ")})
		out = append(out, rs...)
	}
	// Priority clashes: applied, in name order, and said so.
	for i := range sts {
		if !sts[i].Accepted {
			continue
		}
		p := cnps[slices.IndexFunc(cnps, func(c *ClusterNetworkPolicy) bool { return c.Name == sts[i].Name })]
		k := p.Spec.Tier + "/" + strconv.Itoa(int(p.Spec.Priority))
		if others := slices.DeleteFunc(slices.Clone(byPrio[k]), func(n string) bool { return n == p.Name }); len(others) > 0 {
			w := fmt.Sprintf("spec.priority %d: shared in tier %s with %s; xlane orders them by name", p.Spec.Priority, p.Spec.Tier, strings.Join(others, ", "))
			sts[i].Message = strings.TrimPrefix(sts[i].Message+"; "+w, "; ")
		}
	}
	return out, sts
}

// translateCNP translates one policy, or returns the error that keeps it
// out; warn lists what it asks that is not enforced.
func translateCNP(p *ClusterNetworkPolicy, in PolicyInput, pods []pod, nsLabels map[string]labels.Set) (out []rules.Rule, warn []string, err error) {
	s := &p.Spec
	var base, passTo int
	switch s.Tier {
	case CNPTierAdmin:
		base, passTo = CNPAdminBase, CNPAdminPassTo
	case CNPTierBaseline:
		base, passTo = CNPBaselineBase, CNPBaselinePassTo
	default:
		return nil, nil, cnpErrf("spec.tier", "%q: want Admin or Baseline", s.Tier)
	}
	if s.Priority < 0 || s.Priority > 1000 {
		return nil, nil, cnpErrf("spec.priority", "%d: want 0 (first) to 1000", s.Priority)
	}
	subj, err := cnpSubject(s.Subject)
	if err != nil {
		return nil, nil, err
	}
	var own []pod
	for _, q := range pods {
		if q.node == in.NodeName && subj(q, nsLabels) {
			own = append(own, q)
		}
	}
	for _, dir := range []struct {
		name  string
		rules []CNPRule
		in    bool
	}{{"ingress", s.Ingress, true}, {"egress", s.Egress, false}} {
		if len(dir.rules) > cnpMaxRules {
			return nil, nil, cnpErrf("spec."+dir.name, "%d rules: at most %d", len(dir.rules), cnpMaxRules)
		}
		for i, r := range dir.rules {
			field := fmt.Sprintf("spec.%s[%d]", dir.name, i)
			rs, w, err := cnpRule(p, field, i, r, dir.in, base, passTo, own, pods, nsLabels, in.Nodes)
			if err != nil {
				return nil, nil, err
			}
			warn = append(warn, w...)
			out = append(out, rs...)
		}
	}
	return out, warn, nil
}

// cnpSubject returns the subject's pod matcher.
func cnpSubject(s CNPSubject) (func(pod, map[string]labels.Set) bool, error) {
	switch {
	case s.Namespaces != nil && s.Pods != nil:
		return nil, cnpErrf("spec.subject", "both namespaces and pods: want exactly one")
	case s.Namespaces != nil:
		ns, err := cnpSelector("spec.subject.namespaces", s.Namespaces)
		if err != nil {
			return nil, err
		}
		return func(q pod, nsl map[string]labels.Set) bool { return ns.Matches(nsl[q.ns]) }, nil
	case s.Pods != nil:
		return cnpNamespacedPod("spec.subject.pods", s.Pods)
	}
	return nil, cnpErrf("spec.subject", "empty: want namespaces or pods")
}

func cnpNamespacedPod(field string, np *CNPNamespacedPod) (func(pod, map[string]labels.Set) bool, error) {
	ns, err := cnpSelector(field+".namespaceSelector", &np.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	ps, err := cnpSelector(field+".podSelector", &np.PodSelector)
	if err != nil {
		return nil, err
	}
	return func(q pod, nsl map[string]labels.Set) bool { return ns.Matches(nsl[q.ns]) && ps.Matches(q.labels) }, nil
}

func cnpSelector(field string, s *metav1.LabelSelector) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, cnpErrf(field, "%s", err.Error())
	}
	return sel, nil
}

// cnpPeers is what a rule's peers resolve to.
type cnpPeers struct {
	pods  []pod
	addrs rules.List // nodes' addresses and networks
	// failClosed: a peer with no known field (a newer API's peer): a
	// Deny or Pass rule matches everyone, an Accept rule no one.
	failClosed bool
	names      []string // domainNames (canonical)
}

func cnpResolvePeers(field string, peers []CNPPeer, in bool, pods []pod, nsLabels map[string]labels.Set, nodes []*corev1.Node) (cnpPeers, error) {
	var out cnpPeers
	if len(peers) == 0 {
		return out, cnpErrf(field, "empty: a rule needs at least one peer")
	}
	if len(peers) > cnpMaxRules {
		return out, cnpErrf(field, "%d peers: at most %d", len(peers), cnpMaxRules)
	}
	addPods := func(m func(pod, map[string]labels.Set) bool) {
		for _, q := range pods {
			if m(q, nsLabels) && !slices.ContainsFunc(out.pods, func(o pod) bool { return o.ns == q.ns && o.name == q.name }) {
				out.pods = append(out.pods, q)
			}
		}
	}
	for j, pe := range peers {
		f := fmt.Sprintf("%s[%d]", field, j)
		set := 0
		for _, b := range []bool{pe.Namespaces != nil, pe.Pods != nil, pe.Nodes != nil, pe.Networks != nil, pe.DomainNames != nil} {
			if b {
				set++
			}
		}
		if set > 1 {
			return out, cnpErrf(f, "more than one of namespaces, pods, nodes, networks, domainNames: want exactly one")
		}
		if in && (pe.Nodes != nil || pe.Networks != nil || pe.DomainNames != nil) {
			return out, cnpErrf(f, "nodes, networks and domainNames are egress peers")
		}
		switch {
		case pe.Namespaces != nil:
			ns, err := cnpSelector(f+".namespaces", pe.Namespaces)
			if err != nil {
				return out, err
			}
			addPods(func(q pod, nsl map[string]labels.Set) bool { return ns.Matches(nsl[q.ns]) })
		case pe.Pods != nil:
			m, err := cnpNamespacedPod(f+".pods", pe.Pods)
			if err != nil {
				return out, err
			}
			addPods(m)
		case pe.Nodes != nil:
			sel, err := cnpSelector(f+".nodes", pe.Nodes)
			if err != nil {
				return out, err
			}
			for _, n := range nodes {
				if !sel.Matches(labels.Set(n.Labels)) {
					continue
				}
				for _, a := range n.Status.Addresses {
					if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(out.addrs, ip.Unmap().String()) {
						out.addrs = append(out.addrs, ip.Unmap().String())
					}
				}
			}
		case pe.Networks != nil:
			if len(pe.Networks) > cnpMaxRules {
				return out, cnpErrf(f+".networks", "%d CIDRs: at most %d", len(pe.Networks), cnpMaxRules)
			}
			for k, c := range pe.Networks {
				pf, err := netip.ParsePrefix(c)
				if err != nil || pf.Masked() != pf {
					return out, cnpErrf(fmt.Sprintf("%s.networks[%d]", f, k), "%q: want a CIDR without host bits (10.0.0.0/8, fd00::/8)", c)
				}
				out.addrs = append(out.addrs, pf.String())
			}
		case pe.DomainNames != nil:
			if len(pe.DomainNames) == 0 || len(pe.DomainNames) > fqdn.MaxNames {
				return out, cnpErrf(f+".domainNames", "%d names: want 1 to %d", len(pe.DomainNames), fqdn.MaxNames)
			}
			for k, n := range pe.DomainNames {
				if err := fqdn.ValidName(n); err != nil {
					return out, cnpErrf(fmt.Sprintf("%s.domainNames[%d]", f, k), "%s", err.Error())
				}
				if c := fqdn.Canonical(n); !slices.Contains(out.names, c) {
					out.names = append(out.names, c)
				}
			}
		default:
			out.failClosed = true
		}
	}
	return out, nil
}

// cnpProto is one protocol match of a rule: a protocol and its ports
// (nil: every port), or a named port.
type cnpProto struct {
	proto string
	ports []string
	named string
}

func cnpProtocols(field string, ps []CNPProtocol) ([]cnpProto, []string, error) {
	if len(ps) > cnpMaxRules {
		return nil, nil, cnpErrf(field, "%d protocols: at most %d", len(ps), cnpMaxRules)
	}
	var out []cnpProto
	var warn []string
	for i, p := range ps {
		f := fmt.Sprintf("%s[%d]", field, i)
		set := 0
		for _, b := range []bool{p.TCP != nil, p.UDP != nil, p.SCTP != nil, p.DestinationNamedPort != ""} {
			if b {
				set++
			}
		}
		if set != 1 {
			return nil, nil, cnpErrf(f, "want exactly one of tcp, udp, sctp, destinationNamedPort")
		}
		if p.DestinationNamedPort != "" {
			out = append(out, cnpProto{named: p.DestinationNamedPort})
			continue
		}
		proto, pp := "tcp", p.TCP
		switch {
		case p.UDP != nil:
			proto, pp = "udp", p.UDP
		case p.SCTP != nil:
			proto, pp = "sctp", p.SCTP
		}
		c := cnpProto{proto: proto}
		if dp := pp.DestinationPort; dp != nil {
			f := f + "." + proto + ".destinationPort"
			switch {
			case dp.Range != nil && dp.Number != 0:
				return nil, nil, cnpErrf(f, "both number and range: want one")
			case dp.Range != nil:
				if dp.Range.Start < 1 || dp.Range.End > 65535 || dp.Range.Start >= dp.Range.End {
					return nil, nil, cnpErrf(f+".range", "%d-%d: want 1 <= start < end <= 65535", dp.Range.Start, dp.Range.End)
				}
				c.ports = []string{fmt.Sprintf("%d-%d", dp.Range.Start, dp.Range.End)}
			case dp.Number < 1 || dp.Number > 65535:
				return nil, nil, cnpErrf(f+".number", "%d: want 1-65535", dp.Number)
			default:
				c.ports = []string{strconv.Itoa(int(dp.Number))}
			}
		}
		if proto == "sctp" && c.ports != nil {
			warn = append(warn, f+".sctp.destinationPort: SCTP ports are not matched (xlane's firewall reads TCP and UDP ports): the protocol entry matches no traffic")
			continue
		}
		out = append(out, c)
	}
	return out, warn, nil
}

// cnpRule translates rule i of a direction of a policy.
func cnpRule(p *ClusterNetworkPolicy, field string, i int, r CNPRule, in bool, base, passTo int, own, pods []pod,
	nsLabels map[string]labels.Set, nodes []*corev1.Node) ([]rules.Rule, []string, error) {
	var action string
	switch r.Action {
	case CNPAccept:
		action = "allow"
	case CNPDeny:
		action = "drop"
	case CNPPass:
		action = "pass"
	default:
		return nil, nil, cnpErrf(field+".action", "%q: want Accept, Deny or Pass", r.Action)
	}
	peerField, peerList := field+".to", r.To
	if in {
		peerField, peerList = field+".from", r.From
	}
	peers, err := cnpResolvePeers(peerField, peerList, in, pods, nsLabels, nodes)
	if err != nil {
		return nil, nil, err
	}
	var warn []string
	if peers.names != nil && r.Action != CNPAccept {
		return nil, nil, cnpErrf(peerField, "domainNames: only in Accept rules")
	}
	protos, w, err := cnpProtocols(field+".protocols", r.Protocols)
	if err != nil {
		return nil, nil, err
	}
	warn = append(warn, w...)
	if len(own) == 0 {
		return nil, warn, nil
	}
	if len(r.Protocols) > 0 && len(protos) == 0 {
		return nil, warn, nil // SCTP ports only: matches nothing
	}
	anyPeer := peers.failClosed && action != "allow"
	if peers.failClosed && !anyPeer {
		warn = append(warn, peerField+": a peer with no field xlane knows: this Accept rule matches no traffic from it")
	}
	if peers.failClosed && anyPeer {
		action = "drop" // fail closed: deny everything
		warn = append(warn, peerField+": a peer with no field xlane knows: the rule denies all traffic")
	}

	// One firewall rule per protocol entry (ports of one protocol and
	// the named ports of the receivers as resolved in each).
	type entry struct {
		proto string
		ports []string
		recv  []pod // named port: the receivers that have it (nil: all)
	}
	var entries []entry
	if len(protos) == 0 {
		entries = append(entries, entry{})
	}
	receivers := own
	if !in {
		receivers = peers.pods
	}
	for _, pr := range protos {
		if pr.named == "" {
			entries = append(entries, entry{proto: pr.proto, ports: pr.ports})
			continue
		}
		for _, proto := range []string{"tcp", "udp"} {
			byNum := map[int32][]pod{}
			for _, q := range receivers {
				if n := namedPort(q, pr.named, proto); n != 0 {
					byNum[n] = append(byNum[n], q)
				}
			}
			nums := slices.Sorted(maps.Keys(byNum))
			for _, n := range nums {
				entries = append(entries, entry{proto: proto, ports: []string{strconv.Itoa(int(n))}, recv: byNum[n]})
			}
		}
	}
	kind := "eg"
	if in {
		kind = "in"
	}
	// The tier in the name: xlane fw ls, the counters' metrics, xlane
	// monitor and xlane trace name the policy, its tier and the rule.
	name := strings.ToLower(p.Spec.Tier) + ":" + p.Name
	comment := fmt.Sprintf("ClusterNetworkPolicy %s tier %s priority %d %s", p.Name, p.Spec.Tier, p.Spec.Priority, strings.TrimPrefix(field, "spec."))
	if r.Name != "" {
		comment += " " + strconv.Quote(r.Name)
	}
	var out []rules.Rule
	for j, e := range entries {
		has := func(list []pod, q pod) bool {
			return slices.ContainsFunc(list, func(o pod) bool { return o.ns == q.ns && o.name == q.name })
		}
		var ownAddrs, peerAddrs rules.List
		for _, q := range own {
			if e.recv == nil || !in || has(e.recv, q) {
				ownAddrs = append(ownAddrs, addrList(q.addrs)...)
			}
		}
		if !anyPeer {
			for _, q := range peers.pods {
				if e.recv == nil || in || has(e.recv, q) {
					peerAddrs = append(peerAddrs, addrList(q.addrs)...)
				}
			}
			if e.recv == nil {
				peerAddrs = append(peerAddrs, peers.addrs...)
			}
			if len(peerAddrs) == 0 || !shareFamily(ownAddrs, peerAddrs) {
				continue // selects nothing (now)
			}
		}
		if len(ownAddrs) == 0 {
			continue
		}
		fr := rules.Rule{Priority: base + int(p.Spec.Priority)*CNPRuleSlots + i, Action: action, Comment: comment}
		fr.Name = policyRuleName(name, fmt.Sprintf("%s%d", kind, i))
		if len(entries) > 1 {
			fr.Name = policyRuleName(name, fmt.Sprintf("%s%d.%d", kind, i, j))
		}
		if action == "pass" {
			fr.PassTo = passTo
		}
		if e.proto != "" {
			fr.Proto, fr.DstPort = rules.List{e.proto}, e.ports
		}
		if in {
			fr.Direction, fr.Dst, fr.Src = "to-endpoint", ownAddrs, peerAddrs
		} else {
			fr.Direction, fr.Src, fr.Dst = "from-endpoint", ownAddrs, peerAddrs
		}
		out = append(out, fr)
	}
	// domainNames: the addresses each subject pod resolved for the names
	// (internal/fqdn), one rule per protocol entry; a named port is
	// resolved in peer pods, of which names have none.
	for j, e := range entries {
		if peers.names == nil || e.recv != nil {
			continue
		}
		var ownAddrs rules.List
		for _, q := range own {
			ownAddrs = append(ownAddrs, addrList(q.addrs)...)
		}
		if len(ownAddrs) == 0 {
			continue
		}
		fr := rules.Rule{Priority: base + int(p.Spec.Priority)*CNPRuleSlots + i, Action: "allow", Comment: comment + " domainNames",
			Direction: "from-endpoint", Src: ownAddrs, DstNames: peers.names}
		fr.Name = policyRuleName(name, fmt.Sprintf("%s%d.dns", kind, i))
		if len(entries) > 1 {
			fr.Name = policyRuleName(name, fmt.Sprintf("%s%d.%d.dns", kind, i, j))
		}
		if e.proto != "" {
			fr.Proto, fr.DstPort = rules.List{e.proto}, e.ports
		}
		out = append(out, fr)
	}
	return out, warn, nil
}
