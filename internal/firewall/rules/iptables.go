package rules

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Untranslated is an iptables rule the import could not translate.
type Untranslated struct {
	Line   int    `json:"line"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// ImportOptions tune the iptables import.
type ImportOptions struct {
	// Uplink is the node's uplink device: INPUT rules with -i UPLINK (or
	// none) become uplink-scope rules.
	Uplink string
}

// ImportIPTables translates the filter table of iptables-save (or
// ip6tables-save) output into a rule set:
//
//   - INPUT rules become uplink-scope rules (xlane sees what arrives on
//     the uplink, for the node and for containers alike); FORWARD rules
//     become rules for every endpoint, in the direction -i/-o say
//     (an -o into a container device: to-endpoint; -i from one:
//     from-endpoint; neither: both);
//   - chain policies become default policies of the same scopes;
//   - `-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT` (or -m state)
//     becomes `established: true`; a --ctstate NEW match is implied;
//   - matches -s -d -p --sport --dport (ranges, -m multiport) --icmp-type
//     --icmpv6-type --tcp-flags --syn --mac-source -m comment; targets
//     ACCEPT DROP REJECT LOG.
//
// Everything else is returned as Untranslated, with its line and why:
// OUTPUT and user chains, jumps to user chains, RETURN, negations, other
// tables, modules and targets. The rules keep their order (all get the
// default priority; ties keep file order). family is "ipv4" or "ipv6".
func ImportIPTables(data []byte, family string, o ImportOptions) (*RuleSet, []Untranslated, error) {
	rs := &RuleSet{}
	var bad []Untranslated
	table := ""
	count := map[string]int{}
	established := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if strings.HasPrefix(text, "[") { // iptables-save -c counters
			if i := strings.Index(text, "]"); i > 0 {
				text = strings.TrimSpace(text[i+1:])
			}
		}
		switch {
		case strings.HasPrefix(text, "*"):
			table = text[1:]
			continue
		case text == "COMMIT":
			table = ""
			continue
		case strings.HasPrefix(text, ":"):
			if table != "filter" {
				continue
			}
			f := strings.Fields(text[1:])
			if len(f) < 2 || f[1] == "-" || f[1] == "ACCEPT" {
				continue
			}
			d, why := chainDefault(f[0], f[1])
			if why != "" {
				bad = append(bad, Untranslated{line, text, why})
				continue
			}
			rs.Defaults = append(rs.Defaults, d)
			continue
		}
		if table != "filter" {
			if strings.HasPrefix(text, "-A ") {
				bad = append(bad, Untranslated{line, text, fmt.Sprintf("table %s: only the filter table translates", table)})
			}
			continue
		}
		args, err := splitArgs(text)
		if err != nil {
			bad = append(bad, Untranslated{line, text, err.Error()})
			continue
		}
		if len(args) < 2 || args[0] != "-A" {
			bad = append(bad, Untranslated{line, text, "not an -A rule"})
			continue
		}
		chain := args[1]
		count[chain]++
		r, est, why := translate(chain, args[2:], family, o)
		if why != "" {
			bad = append(bad, Untranslated{line, text, why})
			continue
		}
		if est {
			established = true
			continue
		}
		r.Name = fmt.Sprintf("%s-%d", strings.ToLower(chain), count[chain])
		if family == "ipv6" {
			r.Name = "v6-" + r.Name
		}
		rs.Rules = append(rs.Rules, r)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if !established && len(rs.Rules) > 0 {
		f := false
		rs.Established = &f
	}
	return rs, bad, nil
}

func chainDefault(chain, policy string) (Default, string) {
	act := map[string]string{"DROP": "drop", "REJECT": "reject"}[policy]
	if act == "" {
		return Default{}, fmt.Sprintf("policy %s of %s", policy, chain)
	}
	switch chain {
	case "INPUT":
		return Default{Scope: "uplink", Action: act}, ""
	case "FORWARD":
		return Default{Action: act}, ""
	}
	return Default{}, fmt.Sprintf("chain %s: xlane has no hook for it (only INPUT and FORWARD translate)", chain)
}

// translate turns one rule's arguments into a Rule; est reports the
// conntrack ESTABLISHED,RELATED accept rule.
func translate(chain string, args []string, family string, o ImportOptions) (r Rule, est bool, why string) {
	switch chain {
	case "INPUT":
		r.Scope = "uplink"
	case "FORWARD":
	case "OUTPUT":
		return r, false, "chain OUTPUT: xlane does not filter the node's own traffic"
	default:
		return r, false, fmt.Sprintf("user chain %s: only INPUT and FORWARD translate", chain)
	}
	var states []string
	var target string
	modules := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, bool) {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		if a == "!" {
			return r, false, fmt.Sprintf("negation (! %s) does not translate", strings.Join(args[i+1:min(i+3, len(args))], " "))
		}
		switch a {
		case "-s", "--source", "-d", "--destination":
			v, ok := val()
			if !ok || v == "!" {
				return r, false, "negated or missing address"
			}
			for _, x := range strings.Split(v, ",") {
				if a == "-s" || a == "--source" {
					r.Src = append(r.Src, x)
				} else {
					r.Dst = append(r.Dst, x)
				}
			}
		case "-p", "--protocol":
			v, ok := val()
			if !ok || v == "!" {
				return r, false, "negated or missing protocol"
			}
			if v != "all" {
				r.Proto = List{v}
			}
		case "-m", "--match":
			v, ok := val()
			if !ok {
				return r, false, "missing module"
			}
			switch v {
			case "tcp", "udp", "icmp", "icmp6", "ipv6-icmp", "multiport", "conntrack", "state", "comment", "mac":
				modules[v] = true
			default:
				return r, false, fmt.Sprintf("module %s does not translate", v)
			}
		case "--dport", "--destination-port", "--sport", "--source-port", "--dports", "--sports", "--ports":
			v, ok := val()
			if !ok || v == "!" {
				return r, false, "negated or missing port"
			}
			if a == "--ports" {
				return r, false, "--ports (either direction) does not translate"
			}
			for _, p := range strings.Split(v, ",") {
				p = strings.Replace(p, ":", "-", 1)
				if strings.HasPrefix(p, "-") {
					p = "0" + p
				}
				if strings.HasSuffix(p, "-") {
					p += "65535"
				}
				if strings.HasPrefix(a, "--d") {
					r.DstPort = append(r.DstPort, p)
				} else {
					r.SrcPort = append(r.SrcPort, p)
				}
			}
		case "--icmp-type", "--icmpv6-type":
			v, ok := val()
			if !ok || v == "!" {
				return r, false, "negated or missing ICMP type"
			}
			if v == "any" {
				continue
			}
			r.ICMPType = List{v}
		case "--tcp-flags":
			if i+2 >= len(args) || args[i+1] == "!" {
				return r, false, "negated or missing --tcp-flags"
			}
			r.TCPFlags = args[i+1] + "/" + args[i+2]
			i += 2
		case "--syn":
			r.TCPFlags = "syn"
		case "--ctstate", "--state":
			v, ok := val()
			if !ok || v == "!" {
				return r, false, "negated or missing state"
			}
			states = strings.Split(v, ",")
		case "--comment":
			v, _ := val()
			r.Comment = v
		case "--mac-source":
			v, ok := val()
			if !ok || v == "!" {
				return r, false, "negated or missing MAC"
			}
			r.SrcMAC = List{v}
		case "-i", "--in-interface", "-o", "--out-interface":
			v, ok := val()
			if !ok || v == "!" {
				return r, false, "negated or missing interface"
			}
			in := a == "-i" || a == "--in-interface"
			switch {
			case chain == "INPUT" && in && (o.Uplink == "" || v == o.Uplink):
			case chain == "FORWARD" && isContainerIf(v):
				dir := "to-endpoint"
				if in {
					dir = "from-endpoint"
				}
				if r.Direction != "" && r.Direction != dir {
					return r, false, "both -i and -o name container devices"
				}
				r.Direction = dir
			case chain == "FORWARD" && o.Uplink != "" && v == o.Uplink:
				// from/to the uplink: the other side is an endpoint
				dir := "to-endpoint"
				if !in {
					dir = "from-endpoint"
				}
				if r.Direction != "" && r.Direction != dir {
					return r, false, "interfaces in both directions"
				}
				r.Direction = dir
			default:
				return r, false, fmt.Sprintf("interface %s: xlane scopes by network and endpoint, not by device", v)
			}
		case "-j", "--jump":
			v, ok := val()
			if !ok {
				return r, false, "missing target"
			}
			target = v
			// Target options: skip the ones that do not change the verdict.
			for i+1 < len(args) && strings.HasPrefix(args[i+1], "--") {
				switch args[i+1] {
				case "--reject-with", "--log-prefix", "--log-level":
					i += 2
				case "--log-tcp-sequence", "--log-tcp-options", "--log-ip-options", "--log-uid":
					i++
				default:
					return r, false, fmt.Sprintf("target option %s does not translate", args[i+1])
				}
			}
		case "-g", "--goto":
			return r, false, "goto does not translate"
		default:
			return r, false, fmt.Sprintf("option %s does not translate", a)
		}
	}
	switch target {
	case "ACCEPT":
		r.Action = "allow"
	case "DROP":
		r.Action = "drop"
	case "REJECT":
		r.Action = "reject"
	case "LOG":
		r.Action = "log"
	case "":
		return r, false, "no target: a counting rule does not translate"
	default:
		return r, false, fmt.Sprintf("target %s (a user chain or an extension) does not translate", target)
	}
	if states != nil {
		set := map[string]bool{}
		for _, s := range states {
			set[strings.ToUpper(s)] = true
		}
		switch {
		case r.Action == "allow" && (set["ESTABLISHED"] || set["RELATED"]) && !set["NEW"] && !set["INVALID"] &&
			len(r.Src) == 0 && len(r.Dst) == 0 && r.Proto == nil && r.DstPort == nil && r.SrcPort == nil:
			return r, true, ""
		case len(set) == 1 && set["NEW"]:
			// NEW is what reaches the rules when established flows
			// are accepted first: the match is implied.
		default:
			return r, false, fmt.Sprintf("conntrack state %s does not translate (only ESTABLISHED,RELATED accept and NEW)", strings.Join(states, ","))
		}
	}
	if family == "ipv6" && r.Family == "" && len(r.Src) == 0 && len(r.Dst) == 0 {
		r.Family = "ipv6"
	} else if family == "ipv4" && len(r.Src) == 0 && len(r.Dst) == 0 && !isICMP(r.Proto) {
		r.Family = "ipv4"
	}
	if len(r.Proto) == 1 && (r.Proto[0] == "icmp6" || r.Proto[0] == "ipv6-icmp") {
		r.Proto = List{"icmpv6"}
	}
	return r, false, ""
}

func isICMP(p List) bool { return len(p) == 1 && (p[0] == "icmp" || p[0] == "icmpv6") }

// isContainerIf: devices that lead to containers (Docker's and xlane's).
func isContainerIf(name string) bool {
	for _, p := range []string{"docker", "br-", "veth", "xlh", "cni", "cali", "lxc"} {
		if strings.HasPrefix(strings.TrimSuffix(name, "+"), p) {
			return true
		}
	}
	return false
}

// splitArgs splits an iptables-save line into arguments, honouring
// double quotes (comments).
func splitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inQ, has := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQ && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQ, has = !inQ, true
		case (c == ' ' || c == '\t') && !inQ:
			if has || cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteByte(c)
		}
	}
	if inQ {
		return nil, fmt.Errorf("unterminated quote")
	}
	if has || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}
