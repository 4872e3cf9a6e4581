package firewall

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
)

// Kind is where a packet is classified (enum fw_kind).
type Kind uint8

const (
	KindFromEP Kind = Kind(bpf.FwKindFromEP) // sent by an endpoint
	KindToEP   Kind = Kind(bpf.FwKindToEP)   // delivered to an endpoint
	KindUplink Kind = Kind(bpf.FwKindUplink) // arriving on the uplink
)

func (k Kind) String() string {
	switch k {
	case KindFromEP:
		return "from-endpoint"
	case KindToEP:
		return "to-endpoint"
	}
	return "uplink"
}

// Ctx is a hook context: a kind and a network (0: every network).
type Ctx struct {
	Kind Kind
	Net  uint32
}

// PortRange is an inclusive range of port values (ICMP: type or code).
type PortRange struct{ Lo, Hi uint32 }

// Match is a conjunction: a packet matches when every field does. A nil
// list matches anything; address lists are per family, and a family whose
// list is nil does not match at all (V4/V6 say which families match).
type Match struct {
	Ctx                    []Ctx
	V4, V6                 bool
	Src4, Src6, Dst4, Dst6 []netip.Prefix
	Proto                  []uint8
	SPort, DPort           []PortRange
	FlagsMask, FlagsComp   uint8
	SMAC, DMAC             [][6]byte
}

// PRule is a validated rule: an action and the matches (a disjunction:
// an endpoint-scoped rule in both directions is two).
type PRule struct {
	Name     string
	Action   uint8 // bpf.FwAllow, FwDrop, FwReject, FwLog, FwPass
	Sample   uint16
	PassTo   int // FwPass: the search goes on at the first rule of this priority or more
	Default  bool
	Priority int
	Matches  []Match
	// Names (dst_names, canonical): the rule matches only destinations
	// the source resolved for them (internal/fqdn).
	Names []string
}

// Policy is a validated rule set, in evaluation order: rules by priority
// (ties in file order), then default policies, most specific first.
type Policy struct {
	Established bool
	Rules       []PRule
	// Resolved says, for Evaluate, whether src resolved dst for the
	// names of rule i (nil: nothing is resolved).
	Resolved func(i int, src, dst netip.Addr) bool `json:"-"`
}

// Resolver tells Validate about the node.
type Resolver interface {
	// NetworkID returns the id of the network called name.
	NetworkID(name string) (uint32, bool)
	// Endpoint returns an endpoint's network id and addresses.
	Endpoint(id string) (network uint32, addrs []netip.Addr, ok bool)
}

// MapResolver is a Resolver backed by maps (tests, dry runs).
type MapResolver struct {
	Networks  map[string]uint32
	Endpoints map[string]EndpointInfo
}

// EndpointInfo is what a rule's endpoint scope resolves to.
type EndpointInfo struct {
	Network uint32
	Addrs   []netip.Addr
}

func (m MapResolver) NetworkID(name string) (uint32, bool) {
	id, ok := m.Networks[name]
	return id, ok
}

func (m MapResolver) Endpoint(id string) (uint32, []netip.Addr, bool) {
	e, ok := m.Endpoints[id]
	return e.Network, e.Addrs, ok
}

// MaxComment is the longest rule comment (bytes).
const MaxComment = 1024

var ruleNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// liveResolver resolves missing scopes to a network and endpoint id that
// nothing has (their rules match nothing).
type liveResolver struct{ Resolver }

// inactiveNet is a network id no network has: the sequence starts at 1
// and a node never gets near 2^32.
const inactiveNet = ^uint32(0)

func (l liveResolver) NetworkID(name string) (uint32, bool) {
	if id, ok := l.Resolver.NetworkID(name); ok {
		return id, true
	}
	return inactiveNet, true
}

func (l liveResolver) Endpoint(id string) (uint32, []netip.Addr, bool) {
	if n, a, ok := l.Resolver.Endpoint(id); ok {
		return n, a, true
	}
	return inactiveNet, []netip.Addr{netip.IPv6Unspecified()}, true
}

// ferr names the rule and the field: rules[web].dport "70-60": ...
func ferr(rule, field, format string, args ...any) error {
	return model.Fieldf(fmt.Sprintf("rules[%s].%s", rule, field), format, args...)
}

func derr(i int, field, format string, args ...any) error {
	return model.Fieldf(fmt.Sprintf("defaults[%d].%s", i, field), format, args...)
}

// Validate checks every rule and default of rs against the node (res) and
// returns the policy, or the first error, naming the rule and the field.
func Validate(rs *RuleSet, res Resolver) (*Policy, error) { return validate(rs, res, false) }

// ValidateLive is Validate for a rule set already accepted, recompiled
// after the node changed: a rule or default whose endpoint or network is
// gone stays in the set but matches nothing (Inactive), until the scope
// exists again.
func ValidateLive(rs *RuleSet, res Resolver) (*Policy, error) { return validate(rs, res, true) }

func validate(rs *RuleSet, res Resolver, live bool) (*Policy, error) {
	if live {
		res = liveResolver{res}
	}
	p := &Policy{Established: rs.EstablishedOn()}
	seen := map[string]bool{}
	type ordered struct {
		r   PRule
		pos int
	}
	var rules []ordered
	logs, resolved := 0, 0
	bits := 0
	passTo := map[int]bool{}
	for i, r := range rs.Rules {
		name := r.Name
		if name == "" {
			return nil, model.Fieldf(fmt.Sprintf("rules[%d].name", i), "missing: every rule needs a unique name")
		}
		if !ruleNameRE.MatchString(name) || strings.HasPrefix(name, "default:") {
			key := name
			if len(name) > 64 {
				key = strconv.Itoa(i) // not a 10 MB field name
			}
			return nil, ferr(key, "name", "%s: must be 1-64 letters, digits, '_', '.', ':' or '-', not starting with \"default:\"", model.Quote(name))
		}
		if len(r.Comment) > MaxComment {
			return nil, ferr(name, "comment", "%d bytes: at most %d", len(r.Comment), MaxComment)
		}
		if seen[name] {
			return nil, ferr(name, "name", "%q: used by two rules", name)
		}
		seen[name] = true
		pr, err := validateRule(r, res)
		if err != nil {
			return nil, err
		}
		if pr.Action == bpf.FwLog {
			logs += len(pr.Matches)
		}
		if pr.Names != nil {
			resolved += len(pr.Matches)
		}
		if pr.Action == bpf.FwPass {
			passTo[pr.PassTo] = true
			if len(passTo) > bpf.FwMaxPassTo {
				return nil, ferr(name, "pass_to", "%d: the set's pass rules have %d targets, at most %d (each costs a step of a matching packet's search)", pr.PassTo, len(passTo), bpf.FwMaxPassTo)
			}
		}
		bits += len(pr.Matches)
		rules = append(rules, ordered{pr, i})
	}
	if resolved > bpf.FwMaxResolved {
		return nil, model.Fieldf("rules", "%d rules with dst_names: at most %d (each costs a step of the search of a packet to an address not resolved)", resolved, bpf.FwMaxResolved)
	}
	if logs > bpf.FwMaxLogRules {
		return nil, model.Fieldf("rules", "%d log rules: at most %d (each costs a step of every matching packet's search)", logs, bpf.FwMaxLogRules)
	}
	sort.SliceStable(rules, func(a, b int) bool { return rules[a].r.Priority < rules[b].r.Priority })
	for _, o := range rules {
		p.Rules = append(p.Rules, o.r)
	}
	defs, err := validateDefaults(rs.Defaults, res)
	if err != nil {
		return nil, err
	}
	for _, d := range defs {
		bits += len(d.Matches)
	}
	p.Rules = append(p.Rules, defs...)
	if bits > bpf.FwMaxRules {
		return nil, model.Fieldf("rules", "%d rules and defaults need %d classifier bits: at most %d", len(p.Rules), bits, bpf.FwMaxRules)
	}
	return p, nil
}

func parseAction(s string, allowLog bool) (uint8, bool) {
	switch strings.ToLower(s) {
	case "allow", "accept":
		return bpf.FwAllow, true
	case "drop", "deny":
		return bpf.FwDrop, true
	case "reject":
		return bpf.FwReject, true
	case "log":
		return bpf.FwLog, allowLog
	case "pass":
		return bpf.FwPass, allowLog
	}
	return 0, false
}

// scope resolves a scope and direction to the hook contexts, and for an
// endpoint scope the endpoint's addresses.
type scope struct {
	kinds  []Kind
	net    uint32
	ep     bool
	addrs  []netip.Addr
	rank   int // specificity for defaults: endpoint 3, network 2, all/uplink 1
	dirHas int // direction specificity: 1 for one direction
}

func parseScope(s, dir string, res Resolver, fe func(field, format string, args ...any) error) (scope, error) {
	var sc scope
	kind, arg, _ := strings.Cut(s, ":")
	d := strings.ToLower(dir)
	switch kind {
	case "uplink":
		if arg != "" {
			return sc, fe("scope", "%q: uplink takes no argument", s)
		}
		if d != "" && d != "in" && d != "ingress" {
			return sc, fe("direction", "%q: the uplink scope has one direction, in", dir)
		}
		sc.kinds, sc.rank, sc.dirHas = []Kind{KindUplink}, 1, 1
		return sc, nil
	case "", "all":
		if arg != "" {
			return sc, fe("scope", "%q: want all, uplink, network:NAME or endpoint:ID", s)
		}
		sc.rank = 1
	case "network":
		id, ok := res.NetworkID(arg)
		if !ok {
			return sc, fe("scope", "%q: no network called %q", s, arg)
		}
		sc.net, sc.rank = id, 2
	case "endpoint":
		netID, addrs, ok := res.Endpoint(arg)
		if !ok {
			return sc, fe("scope", "%q: no endpoint %q", s, arg)
		}
		if len(addrs) == 0 {
			return sc, fe("scope", "%q: the endpoint has no address", s)
		}
		sc.net, sc.ep, sc.addrs, sc.rank = netID, true, addrs, 3
	default:
		return sc, fe("scope", "%q: want all, uplink, network:NAME or endpoint:ID", s)
	}
	switch d {
	case "", "any", "both":
		sc.kinds = []Kind{KindFromEP, KindToEP}
	case "from-endpoint", "from", "egress", "out":
		sc.kinds, sc.dirHas = []Kind{KindFromEP}, 1
	case "to-endpoint", "to", "ingress", "in":
		sc.kinds, sc.dirHas = []Kind{KindToEP}, 1
	default:
		return sc, fe("direction", "%q: want from-endpoint, to-endpoint or any", dir)
	}
	return sc, nil
}

func validateDefaults(ds []Default, res Resolver) ([]PRule, error) {
	type def struct {
		r        PRule
		rank, dh int
		pos      int
	}
	var out []def
	seen := map[string]int{}
	for i, d := range ds {
		fe := func(field, format string, args ...any) error { return derr(i, field, format, args...) }
		act, ok := parseAction(d.Action, false)
		if !ok {
			return nil, fe("action", "%q: want allow, drop or reject", d.Action)
		}
		sc, err := parseScope(d.Scope, d.Direction, res, fe)
		if err != nil {
			return nil, err
		}
		scopeName := d.Scope
		if scopeName == "" {
			scopeName = "all"
		}
		for _, k := range sc.kinds {
			key := scopeName + ":" + k.String()
			if j, dup := seen[key]; dup {
				return nil, fe("scope", "%q %s: defaults[%d] already sets this scope and direction", scopeName, k, j)
			}
			seen[key] = i
		}
		dirName := "any"
		if len(sc.kinds) == 1 {
			dirName = sc.kinds[0].String()
		}
		r := PRule{Name: "default:" + scopeName + ":" + dirName, Action: act, Default: true}
		for _, k := range sc.kinds {
			if sc.net == inactiveNet {
				break // its endpoint or network is gone: matches nothing
			}
			m := Match{Ctx: []Ctx{{k, sc.net}}, V4: true, V6: true}
			m.Src4, m.Src6 = splitFamilies(nil, true, true)
			m.Dst4, m.Dst6 = splitFamilies(nil, true, true)
			if sc.ep {
				var err error
				if m, err = restrictToEndpoint(m, k, sc.addrs); err != nil {
					return nil, fe("scope", "%q: %v", d.Scope, err)
				}
			}
			r.Matches = append(r.Matches, m)
		}
		out = append(out, def{r, sc.rank, sc.dirHas, i})
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].rank != out[b].rank {
			return out[a].rank > out[b].rank
		}
		return out[a].dh > out[b].dh
	})
	rules := make([]PRule, len(out))
	for i, d := range out {
		rules[i] = d.r
	}
	return rules, nil
}

func validateRule(r Rule, res Resolver) (PRule, error) {
	name := r.Name
	fe := func(field, format string, args ...any) error { return ferr(name, field, format, args...) }
	pr := PRule{Name: name, Priority: r.Priority}
	if pr.Priority == 0 {
		pr.Priority = DefaultPriority
	}
	if pr.Priority < 1 || pr.Priority > 1000000 {
		return pr, fe("priority", "%d: want 1 (first) to 1000000", r.Priority)
	}
	act, ok := parseAction(r.Action, true)
	if !ok {
		if r.Action == "" {
			return pr, fe("action", "missing: want allow, drop, reject, log or pass")
		}
		return pr, fe("action", "%q: want allow, drop, reject, log or pass", r.Action)
	}
	pr.Action = act
	switch {
	case act == bpf.FwPass && r.PassTo <= pr.Priority:
		return pr, fe("pass_to", "%d: a pass rule goes on at a later priority than its own (%d)", r.PassTo, pr.Priority)
	case act == bpf.FwPass && r.PassTo > 1000001:
		return pr, fe("pass_to", "%d: want at most 1000001 (past every rule: the defaults)", r.PassTo)
	case act == bpf.FwPass && r.Log != 0:
		return pr, fe("log", "%d: a pass rule decides nothing, it has no events", r.Log)
	case act != bpf.FwPass && r.PassTo != 0:
		return pr, fe("pass_to", "%d: only for action pass", r.PassTo)
	}
	pr.PassTo = r.PassTo
	if r.Log < 0 || r.Log > 65535 {
		return pr, fe("log", "%d: want 1 (every hit) to 65535 (one hit in 65535), or 0 for no events", r.Log)
	}
	pr.Sample = uint16(r.Log)
	if act == bpf.FwLog && pr.Sample == 0 {
		pr.Sample = 1
	}
	sc, err := parseScope(r.Scope, r.Direction, res, fe)
	if err != nil {
		return pr, err
	}

	var m Match
	m.V4, m.V6 = true, true
	switch strings.ToLower(r.Family) {
	case "":
	case "ipv4", "inet", "4":
		m.V6 = false
	case "ipv6", "inet6", "6":
		m.V4 = false
	default:
		return pr, fe("family", "%q: want ipv4 or ipv6", r.Family)
	}

	// Protocols.
	tcpudp, icmp4, icmp6 := true, false, false
	if r.Proto != nil {
		for _, s := range r.Proto {
			n, err := parseProto(s)
			if err != nil {
				return pr, fe("proto", "%q: %v", s, err)
			}
			if !slices.Contains(m.Proto, n) {
				m.Proto = append(m.Proto, n)
			}
			if n != 6 && n != 17 {
				tcpudp = false
			}
			icmp4 = icmp4 || n == 1
			icmp6 = icmp6 || n == 58
		}
		if len(m.Proto) == 1 && m.Proto[0] == 1 {
			m.V6 = false
		}
		if len(m.Proto) == 1 && m.Proto[0] == 58 {
			m.V4 = false
		}
	}
	if r.SrcPort != nil || r.DstPort != nil {
		if r.Proto == nil || !tcpudp {
			f := "dport"
			if r.DstPort == nil {
				f = "sport"
			}
			return pr, fe(f, "ports need proto tcp or udp (or both)")
		}
		if m.SPort, err = parsePorts(r.SrcPort); err != nil {
			return pr, fe("sport", "%v", err)
		}
		if m.DPort, err = parsePorts(r.DstPort); err != nil {
			return pr, fe("dport", "%v", err)
		}
	}
	if r.ICMPType != nil {
		if len(m.Proto) != 1 || (!icmp4 && !icmp6) {
			return pr, fe("icmp_type", "needs proto icmp or icmpv6 (one of them)")
		}
		if m.DPort, m.SPort, err = parseICMPTypes(r.ICMPType, icmp6); err != nil {
			return pr, fe("icmp_type", "%v", err)
		}
	}
	if r.TCPFlags != "" {
		if len(m.Proto) != 1 || m.Proto[0] != 6 {
			return pr, fe("tcp_flags", "needs proto tcp")
		}
		if m.FlagsMask, m.FlagsComp, err = ParseTCPFlags(r.TCPFlags); err != nil {
			return pr, fe("tcp_flags", "%q: %v", r.TCPFlags, err)
		}
	}
	if m.SMAC, err = parseMACs(r.SrcMAC); err != nil {
		return pr, fe("src_mac", "%v", err)
	}
	if m.DMAC, err = parseMACs(r.DstMAC); err != nil {
		return pr, fe("dst_mac", "%v", err)
	}

	// Addresses, per family.
	src, err := parsePrefixes(r.Src)
	if err != nil {
		return pr, fe("src", "%v", err)
	}
	dst, err := parsePrefixes(r.Dst)
	if err != nil {
		return pr, fe("dst", "%v", err)
	}
	if src != nil {
		m.V4 = m.V4 && hasFamily(src, true)
		m.V6 = m.V6 && hasFamily(src, false)
	}
	if dst != nil {
		m.V4 = m.V4 && hasFamily(dst, true)
		m.V6 = m.V6 && hasFamily(dst, false)
	}
	if !m.V4 && !m.V6 {
		return pr, fe("dst", "no address family is left: family, proto, src and dst have none in common")
	}
	m.Src4, m.Src6 = splitFamilies(src, m.V4, m.V6)
	m.Dst4, m.Dst6 = splitFamilies(dst, m.V4, m.V6)

	if pr.Names, err = validateNames(r, pr.Action, sc.kinds, fe); err != nil {
		return pr, err
	}

	if sc.net == inactiveNet {
		return pr, nil // its endpoint or network is gone: matches nothing
	}
	for _, k := range sc.kinds {
		mk := m
		mk.Ctx = []Ctx{{k, sc.net}}
		if sc.ep {
			if mk, err = restrictToEndpoint(mk, k, sc.addrs); err != nil {
				f := "src"
				if k == KindToEP {
					f = "dst"
				}
				return pr, fe(f, "%v (scope %s, direction %s)", err, r.Scope, k)
			}
		}
		pr.Matches = append(pr.Matches, mk)
	}
	// One match per context is the same rule bit when nothing else
	// differs: merge network/all-scoped directions into one match.
	if !sc.ep && len(pr.Matches) > 1 {
		merged := pr.Matches[0]
		for _, o := range pr.Matches[1:] {
			merged.Ctx = append(merged.Ctx, o.Ctx...)
		}
		pr.Matches = []Match{merged}
	}
	return pr, nil
}

// validateNames checks a rule's dst_names and returns them canonical: an
// allow rule, from endpoints, without dst.
func validateNames(r Rule, act uint8, kinds []Kind, fe func(field, format string, args ...any) error) ([]string, error) {
	if r.DstNames == nil {
		return nil, nil
	}
	switch {
	case len(r.DstNames) == 0:
		return nil, fe("dst_names", "empty: want one name or more")
	case len(r.DstNames) > rules.MaxNames:
		return nil, fe("dst_names", "%d names: at most %d", len(r.DstNames), rules.MaxNames)
	case act != bpf.FwAllow:
		return nil, fe("dst_names", "only in allow rules (the names allow; a later rule drops the rest)")
	case r.Dst != nil:
		return nil, fe("dst_names", "with dst: want one of them")
	case len(kinds) != 1 || kinds[0] != KindFromEP:
		return nil, fe("direction", "%q: dst_names need direction from-endpoint", r.Direction)
	}
	var out []string
	for i, n := range r.DstNames {
		if err := rules.ValidName(n); err != nil {
			return nil, fe(fmt.Sprintf("dst_names[%d]", i), "%v", err)
		}
		if c := rules.CanonicalName(n); !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// restrictToEndpoint narrows m to the endpoint's own addresses on the
// side the kind looks at: the source when it sends, the destination when
// it receives.
func restrictToEndpoint(m Match, k Kind, addrs []netip.Addr) (Match, error) {
	p4, p6 := &m.Src4, &m.Src6
	if k == KindToEP {
		p4, p6 = &m.Dst4, &m.Dst6
	}
	var n4, n6 []netip.Prefix
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() && m.V4 && containedIn(a, *p4) {
			n4 = append(n4, netip.PrefixFrom(a, 32))
		}
		if a.Is6() && m.V6 && containedIn(a, *p6) {
			n6 = append(n6, netip.PrefixFrom(a, 128))
		}
	}
	if len(n4) == 0 && len(n6) == 0 {
		return m, fmt.Errorf("no address of the endpoint is in it")
	}
	*p4, *p6 = n4, n6
	m.V4, m.V6 = n4 != nil, n6 != nil
	if !m.V4 {
		m.Src4, m.Dst4 = nil, nil
	}
	if !m.V6 {
		m.Src6, m.Dst6 = nil, nil
	}
	return m, nil
}

func containedIn(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func hasFamily(ps []netip.Prefix, v4 bool) bool {
	for _, p := range ps {
		if p.Addr().Is4() == v4 {
			return true
		}
	}
	return false
}

// splitFamilies returns the prefixes per family; nil input is "any", as
// the /0 of each family that matches.
func splitFamilies(ps []netip.Prefix, v4, v6 bool) (p4, p6 []netip.Prefix) {
	if ps == nil {
		if v4 {
			p4 = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
		}
		if v6 {
			p6 = []netip.Prefix{netip.MustParsePrefix("::/0")}
		}
		return
	}
	for _, p := range ps {
		if p.Addr().Is4() && v4 {
			p4 = append(p4, p)
		} else if p.Addr().Is6() && v6 {
			p6 = append(p6, p)
		}
	}
	return
}

func parsePrefixes(l List) ([]netip.Prefix, error) {
	if l == nil {
		return nil, nil
	}
	if len(l) == 0 {
		return nil, fmt.Errorf("an empty list matches nothing: leave the field out to match any address")
	}
	out := make([]netip.Prefix, 0, len(l))
	for _, s := range l {
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q: not an address or CIDR prefix", s)
			}
		} else {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q: not an address or CIDR prefix", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%q: zones are not allowed", s)
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return nil, fmt.Errorf("%q: an IPv4-mapped prefix must be /96 or longer", s)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

var protoNames = map[string]uint8{
	"icmp": 1, "igmp": 2, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51,
	"icmpv6": 58, "ipv6-icmp": 58, "sctp": 132, "udplite": 136,
}

func parseProto(s string) (uint8, error) {
	if n, ok := protoNames[strings.ToLower(s)]; ok {
		return n, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("want tcp, udp, icmp, icmpv6, another protocol name or a number 0-255")
	}
	return uint8(n), nil
}

func parsePorts(l List) ([]PortRange, error) {
	if l == nil {
		return nil, nil
	}
	if len(l) == 0 {
		return nil, fmt.Errorf("an empty list matches nothing: leave the field out to match any port")
	}
	var out []PortRange
	for _, s := range l {
		for _, part := range strings.Split(s, ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			if !isRange {
				lo, hi, isRange = strings.Cut(part, ":")
			}
			a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
			if err != nil {
				return nil, fmt.Errorf("%q: want PORT or FIRST-LAST, ports 0-65535", s)
			}
			b := a
			if isRange {
				if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 16); err != nil {
					return nil, fmt.Errorf("%q: want PORT or FIRST-LAST, ports 0-65535", s)
				}
				if b < a {
					return nil, fmt.Errorf("%q: the range ends before it starts", s)
				}
			}
			out = append(out, PortRange{uint32(a), uint32(b)})
		}
	}
	return out, nil
}

var icmpNames = map[string][2]int{ // name -> type, code (-1: any)
	"echo-reply": {0, -1}, "destination-unreachable": {3, -1}, "port-unreachable": {3, 3},
	"fragmentation-needed": {3, 4}, "source-quench": {4, -1}, "redirect": {5, -1},
	"echo-request": {8, -1}, "time-exceeded": {11, -1}, "parameter-problem": {12, -1},
	"timestamp-request": {13, -1}, "timestamp-reply": {14, -1},
}

var icmp6Names = map[string][2]int{
	"destination-unreachable": {1, -1}, "packet-too-big": {2, -1}, "time-exceeded": {3, -1},
	"parameter-problem": {4, -1}, "echo-request": {128, -1}, "echo-reply": {129, -1},
	"router-solicitation": {133, -1}, "router-advertisement": {134, -1},
	"neighbour-solicitation": {135, -1}, "neighbor-solicitation": {135, -1},
	"neighbour-advertisement": {136, -1}, "neighbor-advertisement": {136, -1},
}

// parseICMPTypes reads TYPE[/CODE] (numbers or names). Types go in the
// dport field, codes in sport: one rule may name one code set only, so
// every value must have the same code, or none.
func parseICMPTypes(l List, v6 bool) (types, codes []PortRange, err error) {
	names := icmpNames
	if v6 {
		names = icmp6Names
	}
	code := -2
	for _, s := range l {
		t, c := -1, -1
		if v, ok := names[strings.ToLower(s)]; ok {
			t, c = v[0], v[1]
		} else {
			ts, cs, hasCode := strings.Cut(s, "/")
			n, err := strconv.ParseUint(ts, 10, 8)
			if err != nil {
				return nil, nil, fmt.Errorf("%q: want TYPE[/CODE], numbers 0-255, or a type name", s)
			}
			t = int(n)
			if hasCode {
				n, err := strconv.ParseUint(cs, 10, 8)
				if err != nil {
					return nil, nil, fmt.Errorf("%q: want TYPE[/CODE], numbers 0-255", s)
				}
				c = int(n)
			}
		}
		if code != -2 && code != c {
			return nil, nil, fmt.Errorf("%q: every type of one rule needs the same code (or none); split the rule", s)
		}
		code = c
		types = append(types, PortRange{uint32(t), uint32(t)})
	}
	if code >= 0 {
		codes = []PortRange{{uint32(code), uint32(code)}}
	}
	return types, codes, nil
}

var tcpFlagBits = map[string]uint8{
	"FIN": 0x01, "SYN": 0x02, "RST": 0x04, "PSH": 0x08, "ACK": 0x10, "URG": 0x20,
	"ECE": 0x40, "CWR": 0x80, "ALL": 0xff, "NONE": 0,
}

// ParseTCPFlags reads iptables' --tcp-flags MASK COMP as "MASK/COMP" (e.g.
// "SYN,ACK,FIN,RST/SYN"), or "syn" (= "FIN,SYN,RST,ACK/SYN", iptables'
// --syn). A packet matches when flags & MASK == COMP.
func ParseTCPFlags(s string) (mask, comp uint8, err error) {
	if strings.EqualFold(s, "syn") {
		return 0x17, 0x02, nil
	}
	ms, cs, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("want MASK/SET, e.g. SYN,ACK/SYN, or syn")
	}
	parse := func(x string) (uint8, error) {
		var v uint8
		for _, f := range strings.Split(x, ",") {
			b, ok := tcpFlagBits[strings.ToUpper(strings.TrimSpace(f))]
			if !ok {
				return 0, fmt.Errorf("unknown flag %q (FIN SYN RST PSH ACK URG ECE CWR ALL NONE)", f)
			}
			v |= b
		}
		return v, nil
	}
	if mask, err = parse(ms); err != nil {
		return
	}
	if comp, err = parse(cs); err != nil {
		return
	}
	if comp&^mask != 0 {
		return 0, 0, fmt.Errorf("the set flags must be part of the mask")
	}
	return mask, comp, nil
}

func parseMACs(l List) ([][6]byte, error) {
	if l == nil {
		return nil, nil
	}
	if len(l) == 0 {
		return nil, fmt.Errorf("an empty list matches nothing: leave the field out to match any MAC")
	}
	var out [][6]byte
	for _, s := range l {
		hw, err := net.ParseMAC(s)
		if err != nil || len(hw) != 6 {
			return nil, fmt.Errorf("%q: not an Ethernet MAC address", s)
		}
		out = append(out, [6]byte(hw))
	}
	return out, nil
}
