package cnp

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
)

// Priorities of ClusterNetworkPolicy rules in the firewall, around the
// middle tier (49999-59999: Kubernetes mode's NetworkPolicies, a
// standalone node's own rules given such priorities): the Admin tier
// before it, the Baseline tier after it. A rule's priority is
// its tier's base + the policy's priority (0-1000) × RuleSlots + the
// rule's index (0-24, the order written), so that a lower priority and an
// earlier rule come first; policies of one priority follow each other by
// name (the API leaves their order to the implementation).
const (
	AdminBase    = 10000 // Admin: 10000-42024
	BaselineBase = 60000 // Baseline: 60000-92024
	// An Admin Pass goes on at the middle tier (k8s.PolicyNodePriority,
	// the first rule of the NetworkPolicy tier); a Baseline Pass past
	// every tier: what no tier decides is allowed (the rules and
	// defaults of the node's own set after that still apply).
	AdminPassTo    = 49999
	BaselinePassTo = 99999
	RuleSlots      = 32
	maxRules       = 25 // rules per direction, peers and protocols per rule (the API's MaxItems)
)

// Status is what the translation says of one ClusterNetworkPolicy:
// Accepted, or the field that keeps it out (then none of its rules is
// programmed), and warnings about what it asks that xlane does not do.
type Status struct {
	Name     string
	Accepted bool
	Message  string // the error; or the warnings, "; "-joined
}

// fieldError names the field of a policy that is wrong.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func errf(field, format string, args ...any) error {
	return &fieldError{field, fmt.Sprintf(format, args...)}
}

// Input is what Compile compiles: the policies and the workloads they
// select, of one node.
type Input struct {
	Policies []*ClusterNetworkPolicy
	// Workloads are every workload policies may select (Kubernetes: the
	// cluster's pods; standalone: the node's endpoints); the subjects are
	// those of NodeName.
	Workloads []Workload
	// Namespaces are the namespaces' labels (standalone: a network is a
	// namespace, NamespaceLabels).
	Namespaces map[string]labels.Set
	// Nodes are the nodes peers select (standalone: none).
	Nodes    []Node
	NodeName string
	// Prefix starts every rule's name (k8s.PolicyPrefix, PolicyPrefix):
	// the rules the caller owns in the firewall (ApplyOwned).
	Prefix string
}

// Workload is what a policy sees of a pod or an endpoint.
type Workload struct {
	Namespace, Name string
	Node            string
	Labels          labels.Set
	Addrs           []netip.Addr
	Ports           []NamedPort // for destinationNamedPort
}

// NamedPort is a workload's port with a name (a container port).
type NamedPort struct {
	Name  string
	Proto string // tcp or udp
	Port  int32
}

// Node is what a nodes peer selects: a node's labels and addresses.
type Node struct {
	Labels labels.Set
	Addrs  []netip.Addr
}

// Compile computes the rules of the policies for the workloads of
// in.NodeName and the status of every policy: one refused (an invalid
// field) has no rule, the others apply. Rules are sorted by policy name.
func Compile(in Input) ([]rules.Rule, []Status) {
	var out []rules.Rule
	var sts []Status
	byPrio := map[string][]string{} // tier/priority -> names
	cnps := slices.Clone(in.Policies)
	slices.SortFunc(cnps, func(a, b *ClusterNetworkPolicy) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range cnps {
		rs, warn, err := compilePolicy(p, &in)
		if err != nil {
			sts = append(sts, Status{Name: p.Name, Message: err.Error()})
			continue
		}
		k := p.Spec.Tier + "/" + strconv.Itoa(int(p.Spec.Priority))
		byPrio[k] = append(byPrio[k], p.Name)
		sts = append(sts, Status{Name: p.Name, Accepted: true, Message: strings.Join(warn, "; ")})
		out = append(out, rs...)
	}
	// Priority clashes: applied, in name order, and said so.
	for i := range sts {
		if !sts[i].Accepted {
			continue
		}
		p := cnps[i]
		k := p.Spec.Tier + "/" + strconv.Itoa(int(p.Spec.Priority))
		if others := slices.DeleteFunc(slices.Clone(byPrio[k]), func(n string) bool { return n == p.Name }); len(others) > 0 {
			w := fmt.Sprintf("spec.priority %d: shared in tier %s with %s; xlane orders them by name", p.Spec.Priority, p.Spec.Tier, strings.Join(others, ", "))
			sts[i].Message = strings.TrimPrefix(sts[i].Message+"; "+w, "; ")
		}
	}
	return out, sts
}

// compilePolicy translates one policy, or returns the error that keeps it
// out; warn lists what it asks that is not enforced.
func compilePolicy(p *ClusterNetworkPolicy, in *Input) (out []rules.Rule, warn []string, err error) {
	s := &p.Spec
	var base, passTo int
	switch s.Tier {
	case TierAdmin:
		base, passTo = AdminBase, AdminPassTo
	case TierBaseline:
		base, passTo = BaselineBase, BaselinePassTo
	default:
		return nil, nil, errf("spec.tier", "%q: want Admin or Baseline", s.Tier)
	}
	if s.Priority < 0 || s.Priority > 1000 {
		return nil, nil, errf("spec.priority", "%d: want 0 (first) to 1000", s.Priority)
	}
	subj, err := subjectOf(s.Subject)
	if err != nil {
		return nil, nil, err
	}
	var own []Workload
	for _, q := range in.Workloads {
		if q.Node == in.NodeName && subj(q, in.Namespaces) {
			own = append(own, q)
		}
	}
	for _, dir := range []struct {
		name  string
		rules []Rule
		in    bool
	}{{"ingress", s.Ingress, true}, {"egress", s.Egress, false}} {
		if len(dir.rules) > maxRules {
			return nil, nil, errf("spec."+dir.name, "%d rules: at most %d", len(dir.rules), maxRules)
		}
		for i, r := range dir.rules {
			field := fmt.Sprintf("spec.%s[%d]", dir.name, i)
			rs, w, err := compileRule(p, field, i, r, dir.in, base, passTo, own, in)
			if err != nil {
				return nil, nil, err
			}
			warn = append(warn, w...)
			out = append(out, rs...)
		}
	}
	return out, warn, nil
}

// subjectOf returns the subject's Workload matcher.
func subjectOf(s Subject) (func(Workload, map[string]labels.Set) bool, error) {
	switch {
	case s.Namespaces != nil && s.Pods != nil:
		return nil, errf("spec.subject", "both namespaces and pods: want exactly one")
	case s.Namespaces != nil:
		ns, err := selector("spec.subject.namespaces", s.Namespaces)
		if err != nil {
			return nil, err
		}
		return func(q Workload, nsl map[string]labels.Set) bool { return ns.Matches(nsl[q.Namespace]) }, nil
	case s.Pods != nil:
		return namespacedPod("spec.subject.pods", s.Pods)
	}
	return nil, errf("spec.subject", "empty: want namespaces or pods")
}

func namespacedPod(field string, np *NamespacedPod) (func(Workload, map[string]labels.Set) bool, error) {
	ns, err := selector(field+".namespaceSelector", &np.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	ps, err := selector(field+".podSelector", &np.PodSelector)
	if err != nil {
		return nil, err
	}
	return func(q Workload, nsl map[string]labels.Set) bool {
		return ns.Matches(nsl[q.Namespace]) && ps.Matches(q.Labels)
	}, nil
}

func selector(field string, s *metav1.LabelSelector) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, errf(field, "%s", err.Error())
	}
	return sel, nil
}

// peerSet is what a rule's peers resolve to.
type peerSet struct {
	pods  []Workload
	addrs rules.List // nodes' addresses and networks
	// failClosed: a peer with no known field (a newer API's peer): a
	// Deny or Pass rule matches everyone, an Accept rule no one.
	failClosed bool
	names      []string // domainNames (canonical)
}

func resolvePeers(field string, peers []Peer, ingress bool, in *Input) (peerSet, error) {
	var out peerSet
	if len(peers) == 0 {
		return out, errf(field, "empty: a rule needs at least one peer")
	}
	if len(peers) > maxRules {
		return out, errf(field, "%d peers: at most %d", len(peers), maxRules)
	}
	addPods := func(m func(Workload, map[string]labels.Set) bool) {
		for _, q := range in.Workloads {
			if m(q, in.Namespaces) && !slices.ContainsFunc(out.pods, func(o Workload) bool { return o.Namespace == q.Namespace && o.Name == q.Name }) {
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
			return out, errf(f, "more than one of namespaces, pods, nodes, networks, domainNames: want exactly one")
		}
		if ingress && (pe.Nodes != nil || pe.Networks != nil || pe.DomainNames != nil) {
			return out, errf(f, "nodes, networks and domainNames are egress peers")
		}
		switch {
		case pe.Namespaces != nil:
			ns, err := selector(f+".namespaces", pe.Namespaces)
			if err != nil {
				return out, err
			}
			addPods(func(q Workload, nsl map[string]labels.Set) bool { return ns.Matches(nsl[q.Namespace]) })
		case pe.Pods != nil:
			m, err := namespacedPod(f+".pods", pe.Pods)
			if err != nil {
				return out, err
			}
			addPods(m)
		case pe.Nodes != nil:
			sel, err := selector(f+".nodes", pe.Nodes)
			if err != nil {
				return out, err
			}
			for _, n := range in.Nodes {
				if !sel.Matches(n.Labels) {
					continue
				}
				for _, a := range n.Addrs {
					if s := a.Unmap().String(); !slices.Contains(out.addrs, s) {
						out.addrs = append(out.addrs, s)
					}
				}
			}
		case pe.Networks != nil:
			if len(pe.Networks) > maxRules {
				return out, errf(f+".networks", "%d CIDRs: at most %d", len(pe.Networks), maxRules)
			}
			for k, c := range pe.Networks {
				pf, err := netip.ParsePrefix(c)
				if err != nil || pf.Masked() != pf {
					return out, errf(fmt.Sprintf("%s.networks[%d]", f, k), "%q: want a CIDR without host bits (10.0.0.0/8, fd00::/8)", c)
				}
				out.addrs = append(out.addrs, pf.String())
			}
		case pe.DomainNames != nil:
			if len(pe.DomainNames) == 0 || len(pe.DomainNames) > rules.MaxNames {
				return out, errf(f+".domainNames", "%d names: want 1 to %d", len(pe.DomainNames), rules.MaxNames)
			}
			for k, n := range pe.DomainNames {
				if err := rules.ValidName(n); err != nil {
					return out, errf(fmt.Sprintf("%s.domainNames[%d]", f, k), "%s", err.Error())
				}
				if c := rules.CanonicalName(n); !slices.Contains(out.names, c) {
					out.names = append(out.names, c)
				}
			}
		default:
			out.failClosed = true
		}
	}
	return out, nil
}

// protoMatch is one protocol match of a rule: a protocol and its ports
// (nil: every port), or a named port.
type protoMatch struct {
	proto string
	ports []string
	named string
}

func protocols(field string, ps []Protocol) ([]protoMatch, []string, error) {
	if len(ps) > maxRules {
		return nil, nil, errf(field, "%d protocols: at most %d", len(ps), maxRules)
	}
	var out []protoMatch
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
			return nil, nil, errf(f, "want exactly one of tcp, udp, sctp, destinationNamedPort")
		}
		if p.DestinationNamedPort != "" {
			out = append(out, protoMatch{named: p.DestinationNamedPort})
			continue
		}
		proto, pp := "tcp", p.TCP
		switch {
		case p.UDP != nil:
			proto, pp = "udp", p.UDP
		case p.SCTP != nil:
			proto, pp = "sctp", p.SCTP
		}
		c := protoMatch{proto: proto}
		if dp := pp.DestinationPort; dp != nil {
			f := f + "." + proto + ".destinationPort"
			switch {
			case dp.Range != nil && dp.Number != 0:
				return nil, nil, errf(f, "both number and range: want one")
			case dp.Range != nil:
				if dp.Range.Start < 1 || dp.Range.End > 65535 || dp.Range.Start >= dp.Range.End {
					return nil, nil, errf(f+".range", "%d-%d: want 1 <= start < end <= 65535", dp.Range.Start, dp.Range.End)
				}
				c.ports = []string{fmt.Sprintf("%d-%d", dp.Range.Start, dp.Range.End)}
			case dp.Number < 1 || dp.Number > 65535:
				return nil, nil, errf(f+".number", "%d: want 1-65535", dp.Number)
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

// compileRule translates rule i of a direction of a policy.
func compileRule(p *ClusterNetworkPolicy, field string, i int, r Rule, ingress bool, base, passTo int, own []Workload, in *Input) ([]rules.Rule, []string, error) {
	var action string
	switch r.Action {
	case Accept:
		action = "allow"
	case Deny:
		action = "drop"
	case Pass:
		action = "pass"
	default:
		return nil, nil, errf(field+".action", "%q: want Accept, Deny or Pass", r.Action)
	}
	peerField, peerList := field+".to", r.To
	if ingress {
		peerField, peerList = field+".from", r.From
	}
	peers, err := resolvePeers(peerField, peerList, ingress, in)
	if err != nil {
		return nil, nil, err
	}
	var warn []string
	if peers.names != nil && r.Action != Accept {
		return nil, nil, errf(peerField, "domainNames: only in Accept rules")
	}
	protos, w, err := protocols(field+".protocols", r.Protocols)
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
		recv  []Workload // named port: the receivers that have it (nil: all)
	}
	var entries []entry
	if len(protos) == 0 {
		entries = append(entries, entry{})
	}
	receivers := own
	if !ingress {
		receivers = peers.pods
	}
	for _, pr := range protos {
		if pr.named == "" {
			entries = append(entries, entry{proto: pr.proto, ports: pr.ports})
			continue
		}
		for _, proto := range []string{"tcp", "udp"} {
			byNum := map[int32][]Workload{}
			for _, q := range receivers {
				if n := q.PortNumber(pr.named, proto); n != 0 {
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
	if ingress {
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
		has := func(list []Workload, q Workload) bool {
			return slices.ContainsFunc(list, func(o Workload) bool { return o.Namespace == q.Namespace && o.Name == q.Name })
		}
		var ownAddrs, peerAddrs rules.List
		for _, q := range own {
			if e.recv == nil || !ingress || has(e.recv, q) {
				ownAddrs = append(ownAddrs, AddrList(q.Addrs)...)
			}
		}
		if !anyPeer {
			for _, q := range peers.pods {
				if e.recv == nil || ingress || has(e.recv, q) {
					peerAddrs = append(peerAddrs, AddrList(q.Addrs)...)
				}
			}
			if e.recv == nil {
				peerAddrs = append(peerAddrs, peers.addrs...)
			}
			if len(peerAddrs) == 0 || !ShareFamily(ownAddrs, peerAddrs) {
				continue // selects nothing (now)
			}
		}
		if len(ownAddrs) == 0 {
			continue
		}
		fr := rules.Rule{Priority: base + int(p.Spec.Priority)*RuleSlots + i, Action: action, Comment: comment}
		fr.Name = RuleName(in.Prefix, name, fmt.Sprintf("%s%d", kind, i))
		if len(entries) > 1 {
			fr.Name = RuleName(in.Prefix, name, fmt.Sprintf("%s%d.%d", kind, i, j))
		}
		if action == "pass" {
			fr.PassTo = passTo
		}
		if e.proto != "" {
			fr.Proto, fr.DstPort = rules.List{e.proto}, e.ports
		}
		if ingress {
			fr.Direction, fr.Dst, fr.Src = "to-endpoint", ownAddrs, peerAddrs
		} else {
			fr.Direction, fr.Src, fr.Dst = "from-endpoint", ownAddrs, peerAddrs
		}
		out = append(out, fr)
	}
	// domainNames: the addresses each subject Workload resolved for the names
	// (internal/fqdn), one rule per protocol entry; a named port is
	// resolved in peer pods, of which names have none.
	for j, e := range entries {
		if peers.names == nil || e.recv != nil {
			continue
		}
		var ownAddrs rules.List
		for _, q := range own {
			ownAddrs = append(ownAddrs, AddrList(q.Addrs)...)
		}
		if len(ownAddrs) == 0 {
			continue
		}
		fr := rules.Rule{Priority: base + int(p.Spec.Priority)*RuleSlots + i, Action: "allow", Comment: comment + " domainNames",
			Direction: "from-endpoint", Src: ownAddrs, DstNames: peers.names}
		fr.Name = RuleName(in.Prefix, name, fmt.Sprintf("%s%d.dns", kind, i))
		if len(entries) > 1 {
			fr.Name = RuleName(in.Prefix, name, fmt.Sprintf("%s%d.%d.dns", kind, i, j))
		}
		if e.proto != "" {
			fr.Proto, fr.DstPort = rules.List{e.proto}, e.ports
		}
		out = append(out, fr)
	}
	return out, warn, nil
}

// PortNumber is the number of the workload's port called name with
// protocol proto (tcp, udp), or 0.
func (q Workload) PortNumber(name, proto string) int32 {
	for _, p := range q.Ports {
		if p.Name == name && strings.EqualFold(p.Proto, proto) {
			return p.Port
		}
	}
	return 0
}

// ShareFamily reports whether two address lists have a family in common.
func ShareFamily(a, b rules.List) bool {
	fams := func(l rules.List) (v4, v6 bool) {
		for _, s := range l {
			if strings.Contains(s, ":") {
				v6 = true
			} else {
				v4 = true
			}
		}
		return v4, v6
	}
	a4, a6 := fams(a)
	b4, b6 := fams(b)
	return a4 && b4 || a6 && b6
}

// AddrList is the addresses as a rule's address list.
func AddrList(as []netip.Addr) rules.List {
	out := make(rules.List, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// RuleName is prefix + BASE.SUFFIX within the firewall's 64 characters
// (model.ClipName).
func RuleName(prefix, base, suffix string) string {
	return model.ClipName(prefix + base + "." + suffix)
}
