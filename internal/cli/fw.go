package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

func fwCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "fw",
		Aliases: []string{"firewall"},
		Short:   "Stateful firewall and DDoS defence in the datapath",
		Long: `The firewall classifies packets where they leave an endpoint (from-endpoint),
reach one (to-endpoint) and arrive on the node's uplink (uplink), with rules
in priority order and a default policy per scope. Packets of established
flows (and ICMP errors about them) pass before any rule unless the rule set
says "established: false". Its cost per packet does not grow with the
number of rules (docs/firewall.md).

A rule set is a YAML file:

  established: true
  defaults:
    - {scope: network:blue, direction: to-endpoint, action: drop}
  rules:
    - name: web
      scope: network:blue
      direction: to-endpoint
      proto: tcp
      dport: [80, 443]
      action: allow
    - name: ssh-admins
      scope: endpoint:ctr42
      proto: tcp
      dport: 22
      src: [10.0.0.0/8, fd00::/8]
      action: allow
      log: 100            # an event for 1 hit in 100
    - name: no-smtp
      priority: 10        # lower first (default 1000; ties keep file order)
      proto: tcp
      dport: 25
      action: reject

Fields: name, action (allow, drop, reject, log), priority, log, scope (all,
uplink, network:NAME, endpoint:ID), direction (from-endpoint, to-endpoint,
any), family (ipv4, ipv6), proto, src, dst (CIDRs), sport, dport (ports,
FIRST-LAST), icmp_type (TYPE[/CODE] or a name), tcp_flags (MASK/SET or
syn), src_mac, dst_mac, comment. Lists take one value or several.

Every change is validated in full and applied atomically: packets see the
old rule set or the new one, never a mix. A file with an error changes
nothing, and the error names the rule and the field.`,
	}
	cmd.AddCommand(fwApplyCmd(e), fwDiffCmd(e), fwLsCmd(e), fwGetCmd(e), fwAddCmd(e), fwUpdateCmd(e),
		fwRmCmd(e), fwExportCmd(e), fwImportCmd(e), fwDDoSCmd(e), fwBlockCmd(e))
	return cmd
}

func readRuleSet(path string) (*rules.RuleSet, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	rs, err := rules.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

func fwApplyCmd(e *env) *cobra.Command {
	var dry bool
	c := &cobra.Command{
		Use:   "apply FILE",
		Short: "Replace the rule set with FILE's (atomically); - reads stdin",
		Example: `  xlane fw apply rules.yaml
  xlane fw apply --dry-run rules.yaml     # validate and show the diff only`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := readRuleSet(args[0])
			if err != nil {
				return err
			}
			out, err := e.client().FirewallApply(cmd.Context(), *rs, dry)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				fmt.Fprint(w, out.Diff.String())
				if out.Applied {
					fmt.Fprintf(w, "applied: generation %d\n", out.Generation)
				} else {
					fmt.Fprintln(w, "dry run: nothing changed")
				}
			})
		},
	}
	c.Flags().BoolVar(&dry, "dry-run", false, "validate and show what would change, change nothing")
	return c
}

func fwDiffCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "diff FILE",
		Short: "Show what applying FILE would change (after validating it)",
		Example: `  xlane fw diff rules.yaml
  xlane fw export | xlane fw diff -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := readRuleSet(args[0])
			if err != nil {
				return err
			}
			out, err := e.client().FirewallDiff(cmd.Context(), *rs)
			if err != nil {
				return err
			}
			return e.print(out.Diff, func(w *tabwriter.Writer) { fmt.Fprint(w, out.Diff.String()) })
		},
	}
}

func fwLsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the rules in evaluation order, with counters and drop reasons",
		Example: `  xlane fw ls
  xlane fw ls -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fw, err := e.client().Firewall(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(fw, func(w *tabwriter.Writer) {
				state := "off (no rule set)"
				if fw.Enabled {
					state = fmt.Sprintf("on, generation %d, %d classes", fw.Generation, fw.Classes)
				}
				fmt.Fprintf(w, "firewall:\t%s\nestablished flows:\t%s\n", state, map[bool]string{true: "allowed before the rules", false: "classified"}[fw.Established])
				fmt.Fprintln(w, "\n#\tNAME\tACTION\tMATCH\tPACKETS\tBYTES\tLAST HIT")
				for _, r := range append(fw.Rules, fw.Defaults...) {
					match := matchSummary(r.Rule)
					if r.Bits == 0 && !r.Default {
						match += " (inactive: scope gone)"
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", r.Position, r.Name, r.Action, match, r.Packets, r.Bytes, ago(r.LastHit))
				}
				d := fw.DDoS
				fmt.Fprintf(w, "\nuplink DDoS:\tblocklist %d prefixes, rate %s, SYN rate %s, malformed %s\n", fw.Blocklist,
					rate(d.PPS, d.Burst), rate(d.SYNPPS, d.SYNBurst), map[bool]string{true: "dropped", false: "passed"}[d.Malformed])
				if len(fw.Drops) > 0 {
					fmt.Fprintln(w, "\nDIRECTION\tREASON\tPACKETS\tBYTES")
					for _, r := range fw.Drops {
						fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", r.Direction, r.Reason, r.Packets, r.Bytes)
					}
				}
			})
		},
	}
}

func rate(pps, burst uint32) string {
	if pps == 0 {
		return "off"
	}
	return fmt.Sprintf("%d/s (burst %d)", pps, burst)
}

func ago(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return time.Since(*t).Truncate(time.Second).String() + " ago"
}

// matchSummary is rules.Summary without the action.
func matchSummary(r rules.Rule) string {
	s := rules.Summary(r)
	return strings.TrimPrefix(s, r.Action+" ")
}

func fwGetCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show one rule (YAML) with its counters",
		Example: `  xlane fw get web
  xlane fw get web -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := e.client().FirewallRule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.print(r, func(w *tabwriter.Writer) {
				y, _ := rules.Marshal(&rules.RuleSet{Rules: []rules.Rule{r.Rule}})
				fmt.Fprintf(w, "%s", strings.TrimPrefix(string(y), "rules:\n"))
				fmt.Fprintf(w, "# position %d, %d classifier bit(s), %d packets, %d bytes, last hit %s\n",
					r.Position, r.Bits, r.Packets, r.Bytes, ago(r.LastHit))
			})
		},
	}
}

// ruleFlags binds a rule's fields to flags; set reports which were given.
type ruleFlags struct {
	r    rules.Rule
	file string
}

func (f *ruleFlags) bind(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "read the rule from a YAML file (one rule, or a rule set of one rule)")
	fl.StringVar(&f.r.Action, "action", "", "allow, drop, reject or log")
	fl.IntVar(&f.r.Priority, "priority", 0, "1 (first) to 1000000; default 1000, ties in order of addition")
	fl.IntVar(&f.r.Log, "log", 0, "emit an event for 1 hit in N (log rules: default 1)")
	fl.StringVar(&f.r.Scope, "scope", "", "all, uplink, network:NAME or endpoint:ID")
	fl.StringVar(&f.r.Direction, "direction", "", "from-endpoint, to-endpoint or any")
	fl.StringVar(&f.r.Family, "family", "", "ipv4 or ipv6")
	fl.StringSliceVar((*[]string)(&f.r.Proto), "proto", nil, "protocols (tcp, udp, icmp, icmpv6, a number)")
	fl.StringSliceVar((*[]string)(&f.r.Src), "src", nil, "source addresses or CIDRs")
	fl.StringSliceVar((*[]string)(&f.r.Dst), "dst", nil, "destination addresses or CIDRs")
	fl.StringSliceVar((*[]string)(&f.r.SrcPort), "sport", nil, "source ports (PORT or FIRST-LAST)")
	fl.StringSliceVar((*[]string)(&f.r.DstPort), "dport", nil, "destination ports (PORT or FIRST-LAST)")
	fl.StringSliceVar((*[]string)(&f.r.ICMPType), "icmp-type", nil, "ICMP types (TYPE[/CODE] or a name)")
	fl.StringVar(&f.r.TCPFlags, "tcp-flags", "", "MASK/SET (e.g. SYN,ACK/SYN) or syn")
	fl.StringSliceVar((*[]string)(&f.r.SrcMAC), "src-mac", nil, "source MACs")
	fl.StringSliceVar((*[]string)(&f.r.DstMAC), "dst-mac", nil, "destination MACs")
	fl.StringSliceVar((*[]string)(&f.r.DstNames), "dst-names", nil, "DNS names (*.example.com: every name below): allow only the addresses the endpoint resolved for them (allow, from-endpoint)")
	fl.StringVar(&f.r.Comment, "comment", "", "a note")
}

// rule returns the rule of the flags (or the file), named name.
func (f *ruleFlags) rule(c *cobra.Command, name string) (rules.Rule, error) {
	if f.file == "" {
		f.r.Name = name
		return f.r, nil
	}
	data, err := os.ReadFile(f.file)
	if err != nil {
		return rules.Rule{}, err
	}
	rs, err := rules.Parse(data)
	if err == nil && len(rs.Rules) != 1 {
		err = fmt.Errorf("holds %d rules, want one", len(rs.Rules))
	}
	if err != nil {
		// A bare rule (a mapping, not a rule set).
		if r, rerr := rules.Parse(append([]byte("rules:\n- "), bytes.ReplaceAll(data, []byte("\n"), []byte("\n  "))...)); rerr == nil && len(r.Rules) == 1 {
			rs, err = r, nil
		}
	}
	if err != nil {
		return rules.Rule{}, fmt.Errorf("%s: %w", f.file, err)
	}
	r := rs.Rules[0]
	if name != "" {
		r.Name = name
	}
	return r, nil
}

func fwAddCmd(e *env) *cobra.Command {
	var f ruleFlags
	c := &cobra.Command{
		Use:   "add NAME --action ACTION [match flags] | add [NAME] -f FILE",
		Short: "Add one rule to the rule set in force",
		Example: `  xlane fw add web --scope network:blue --direction to-endpoint --proto tcp --dport 80,443 --action allow
  xlane fw add no-telnet --proto tcp --dport 23 --action reject --priority 10
  xlane fw add apis --direction from-endpoint --proto tcp --dport 443 --dst-names 'api.example.com,*.example.net' --action allow --priority 20
  xlane fw add -f rule.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			r, err := f.rule(cmd, name)
			if err != nil {
				return err
			}
			out, err := e.client().FirewallAdd(cmd.Context(), r)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "added %s at position %d: %s\n", out.Name, out.Position, rules.Summary(out.Rule))
			})
		},
	}
	f.bind(c)
	return c
}

func fwUpdateCmd(e *env) *cobra.Command {
	var f ruleFlags
	var rename string
	c := &cobra.Command{
		Use:   "update NAME [flags] | update NAME -f FILE",
		Short: "Change one rule: the flags given replace those fields (-f replaces the whole rule)",
		Example: `  xlane fw update web --dport 80,443,8443
  xlane fw update web --action drop --log 10`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r rules.Rule
			if f.file != "" {
				var err error
				if r, err = f.rule(cmd, args[0]); err != nil {
					return err
				}
			} else {
				cur, err := e.client().FirewallRule(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				r = cur.Rule
				merge(cmd, &r, f.r)
			}
			if rename != "" {
				r.Name = rename
			}
			out, err := e.client().FirewallUpdate(cmd.Context(), args[0], r)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "updated %s at position %d: %s\n", out.Name, out.Position, rules.Summary(out.Rule))
			})
		},
	}
	f.bind(c)
	c.Flags().StringVar(&rename, "rename", "", "new name")
	return c
}

// merge copies the fields whose flags were given.
func merge(c *cobra.Command, dst *rules.Rule, src rules.Rule) {
	ch := func(n string) bool { return c.Flags().Changed(n) }
	if ch("action") {
		dst.Action = src.Action
	}
	if ch("priority") {
		dst.Priority = src.Priority
	}
	if ch("log") {
		dst.Log = src.Log
	}
	if ch("scope") {
		dst.Scope = src.Scope
	}
	if ch("direction") {
		dst.Direction = src.Direction
	}
	if ch("family") {
		dst.Family = src.Family
	}
	lists := []struct {
		flag     string
		dst, src *rules.List
	}{{"proto", &dst.Proto, &src.Proto}, {"src", &dst.Src, &src.Src}, {"dst", &dst.Dst, &src.Dst},
		{"sport", &dst.SrcPort, &src.SrcPort}, {"dport", &dst.DstPort, &src.DstPort},
		{"icmp-type", &dst.ICMPType, &src.ICMPType}, {"src-mac", &dst.SrcMAC, &src.SrcMAC}, {"dst-mac", &dst.DstMAC, &src.DstMAC},
		{"dst-names", &dst.DstNames, &src.DstNames}}
	for _, l := range lists {
		if ch(l.flag) {
			*l.dst = *l.src
			if len(*l.dst) == 0 {
				*l.dst = nil // --dport "" clears the field
			}
		}
	}
	if ch("tcp-flags") {
		dst.TCPFlags = src.TCPFlags
	}
	if ch("comment") {
		dst.Comment = src.Comment
	}
}

func fwRmCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove rules (removing a missing one succeeds)",
		Example: `  xlane fw rm web
  xlane fw rm web no-telnet`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := e.client().FirewallRemove(cmd.Context(), n); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func fwExportCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "export",
		Short: "Print the rule set in force as YAML (apply's input)",
		Example: `  xlane fw export > rules.yaml
  xlane fw export -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fw, err := e.client().Firewall(cmd.Context())
			if err != nil {
				return err
			}
			rs := rules.RuleSet{}
			if !fw.Established {
				f := false
				rs.Established = &f
			}
			for _, r := range fw.Rules {
				rs.Rules = append(rs.Rules, r.Rule)
			}
			for _, d := range fw.Defaults {
				rs.Defaults = append(rs.Defaults, rules.Default{Scope: d.Scope, Direction: d.Direction, Action: d.Action})
			}
			if e.output == "json" {
				return e.print(rs, nil)
			}
			y, err := rules.Marshal(&rs)
			if err != nil {
				return err
			}
			_, err = e.out.Write(y)
			return err
		},
	}
}

func fwImportCmd(e *env) *cobra.Command {
	var family, uplink string
	var apply bool
	c := &cobra.Command{
		Use:   "import FILE",
		Short: "Translate iptables-save filter rules to a rule set (YAML on stdout)",
		Long: `import reads iptables-save (or ip6tables-save --family ipv6) output and prints
the equivalent rule set; every rule it cannot translate is named on stderr
with its line and the reason. INPUT becomes the uplink scope, FORWARD the
endpoints' (direction from -i/-o), chain policies default policies, and an
ESTABLISHED,RELATED accept "established: true". With --apply the result is
applied (only when everything translated).`,
		Example: `  iptables-save | xlane fw import - > rules.yaml
  xlane fw import --uplink eth0 --apply saved.rules`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(os.Stdin)
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			rs, bad, err := rules.ImportIPTables(data, family, rules.ImportOptions{Uplink: uplink})
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			for _, b := range bad {
				fmt.Fprintf(stderr, "line %d: not translated: %s\n    %s\n", b.Line, b.Reason, b.Rule)
			}
			if len(bad) > 0 {
				fmt.Fprintf(stderr, "%d rule(s) not translated\n", len(bad))
			}
			if apply {
				if len(bad) > 0 {
					return fmt.Errorf("not applied: %d rule(s) did not translate", len(bad))
				}
				out, err := e.client().FirewallApply(cmd.Context(), *rs, false)
				if err != nil {
					return err
				}
				fmt.Fprint(stderr, out.Diff.String())
				fmt.Fprintf(stderr, "applied: generation %d\n", out.Generation)
			}
			if e.output == "json" {
				return e.print(struct {
					RuleSet      *rules.RuleSet       `json:"ruleset"`
					Untranslated []rules.Untranslated `json:"untranslated"`
				}{rs, bad}, nil)
			}
			y, err := rules.Marshal(rs)
			if err != nil {
				return err
			}
			_, err = e.out.Write(y)
			return err
		},
	}
	c.Flags().StringVar(&family, "family", "ipv4", "ipv4 (iptables-save) or ipv6 (ip6tables-save)")
	c.Flags().StringVar(&uplink, "uplink", "", "the node's uplink device (INPUT -i UPLINK translates)")
	c.Flags().BoolVar(&apply, "apply", false, "apply the result")
	return c
}

func fwDDoSCmd(e *env) *cobra.Command {
	var d rules.DDoS
	var off bool
	c := &cobra.Command{
		Use:   "ddos [--pps N] [--burst N] [--syn-pps N] [--syn-burst N] [--malformed] | ddos --off",
		Short: "Show or set the uplink's per-source rate limits and malformed-header drop",
		Long: `The uplink's XDP program drops, before anything else: sources in the
blocklist (xlane fw block), sources over --pps packets per second or --syn-pps
TCP SYNs per second (token buckets per source address, grouped by
--v4-prefix/--v6-prefix), and, with --malformed, packets with malformed IP or
TCP/UDP headers or impossible TCP flags. Without flags: show the settings.`,
		Example: `  xlane fw ddos --pps 100000 --syn-pps 200 --malformed
  xlane fw ddos --off`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out *rules.DDoS
			var err error
			set := false
			for _, n := range []string{"pps", "burst", "syn-pps", "syn-burst", "v4-prefix", "v6-prefix", "malformed", "off"} {
				set = set || cmd.Flags().Changed(n)
			}
			if !set {
				out, err = e.client().FirewallDDoS(cmd.Context())
			} else {
				if off {
					d = rules.DDoS{}
				}
				out, err = e.client().SetFirewallDDoS(cmd.Context(), d)
			}
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "rate:\t%s per /%d (IPv4), /%d (IPv6) source\nSYN rate:\t%s\nmalformed:\t%v\n",
					rate(out.PPS, out.Burst), out.V4Prefix, out.V6Prefix, rate(out.SYNPPS, out.SYNBurst), out.Malformed)
			})
		},
	}
	fl := c.Flags()
	fl.Uint32Var(&d.PPS, "pps", 0, "packets per second per source (0: no limit)")
	fl.Uint32Var(&d.Burst, "burst", 0, "bucket depth in packets (default: --pps)")
	fl.Uint32Var(&d.SYNPPS, "syn-pps", 0, "TCP SYNs per second per source (0: no limit)")
	fl.Uint32Var(&d.SYNBurst, "syn-burst", 0, "SYN bucket depth (default: --syn-pps)")
	fl.Uint8Var(&d.V4Prefix, "v4-prefix", 0, "IPv4 sources share a bucket per /N (default 32)")
	fl.Uint8Var(&d.V6Prefix, "v6-prefix", 0, "IPv6 sources share a bucket per /N (default 64)")
	fl.BoolVar(&d.Malformed, "malformed", false, "drop malformed headers on the uplink")
	fl.BoolVar(&off, "off", false, "turn rate limits and the malformed drop off")
	return c
}

// blockChunk keeps blocklist requests well under the API's body limit.
const blockChunk = 50000

func fwBlockCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "block",
		Short: "The uplink's prefix blocklist (LPM, millions of entries)",
	}
	send := func(cmd *cobra.Command, add, rm []string) error {
		var last *api.FirewallBlocklist
		for len(add) > 0 || len(rm) > 0 {
			var req api.FirewallBlock
			n := min(len(add), blockChunk)
			req.Add, add = add[:n], add[n:]
			m := min(len(rm), blockChunk-n)
			req.Remove, rm = rm[:m], rm[m:]
			out, err := e.client().FirewallBlock(cmd.Context(), req)
			if err != nil {
				return err
			}
			last = out
		}
		if last == nil {
			return nil
		}
		return e.print(last, func(w *tabwriter.Writer) { fmt.Fprintf(w, "blocklist: %d prefixes\n", last.Count) })
	}
	add := &cobra.Command{
		Use:   "add CIDR...",
		Short: "Block sources",
		Example: `  xlane fw block add 198.51.100.0/24
  xlane fw block add 203.0.113.7 2001:db8:bad::/48`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return send(cmd, args, nil) },
	}
	rm := &cobra.Command{
		Use:     "rm CIDR...",
		Aliases: []string{"remove", "delete"},
		Short:   "Unblock sources",
		Example: `  xlane fw block rm 198.51.100.0/24`,
		Args:    cobra.MinimumNArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return send(cmd, nil, args) },
	}
	load := &cobra.Command{
		Use:   "load FILE",
		Short: "Block every prefix of FILE (one per line, # comments; - reads stdin)",
		Example: `  xlane fw block load blocklist.txt
  curl -s https://example.org/drop.txt | xlane fw block load -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = os.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			var ps []string
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				l := strings.TrimSpace(sc.Text())
				if i := strings.IndexByte(l, '#'); i >= 0 {
					l = strings.TrimSpace(l[:i])
				}
				if l != "" {
					ps = append(ps, l)
				}
			}
			if err := sc.Err(); err != nil {
				return err
			}
			return send(cmd, ps, nil)
		},
	}
	var limit int
	ls := &cobra.Command{
		Use:   "ls",
		Short: "Show the blocklist's size (and entries with --limit)",
		Example: `  xlane fw block ls
  xlane fw block ls --limit 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := e.client().FirewallBlocklist(cmd.Context(), limit)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "blocklist: %d prefixes\n", out.Count)
				for _, p := range out.Entries {
					fmt.Fprintln(w, p)
				}
			})
		},
	}
	ls.Flags().IntVar(&limit, "limit", 0, "list up to N entries")
	flush := &cobra.Command{
		Use:     "flush",
		Short:   "Empty the blocklist",
		Example: `  xlane fw block flush`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.client().FlushFirewallBlocklist(cmd.Context())
		},
	}
	cmd.AddCommand(add, rm, load, ls, flush)
	return cmd
}
