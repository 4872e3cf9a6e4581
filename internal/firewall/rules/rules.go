package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/xlane-dev/xlane/internal/model"
)

// RuleSet is what `xlane fw apply FILE` reads: rules in priority order,
// default policies per scope, and whether established flows skip the rules.
type RuleSet struct {
	// Established: packets of established flows (a reply, or a flow both
	// sides have spoken in) and ICMP errors about tracked flows are
	// allowed before any rule, as `-m conntrack --ctstate
	// ESTABLISHED,RELATED -j ACCEPT` first in a chain. Default true.
	Established *bool     `yaml:"established,omitempty" json:"established,omitempty"`
	Defaults    []Default `yaml:"defaults,omitempty" json:"defaults,omitempty"`
	Rules       []Rule    `yaml:"rules,omitempty" json:"rules,omitempty"`
}

// Default is the policy of a scope and direction when no rule matches.
type Default struct {
	Scope     string `yaml:"scope,omitempty" json:"scope,omitempty"`
	Direction string `yaml:"direction,omitempty" json:"direction,omitempty"`
	Action    string `yaml:"action" json:"action"`
}

// Rule is one firewall rule. Fields left out match anything; a list
// matches any of its values. Rules are tried by priority (lower first),
// ties in the order given; the first match decides (a log rule logs and
// the next one decides; a pass rule skips the rules of priority below its
// PassTo, a tier's later rules, and the search goes on there).
type Rule struct {
	Name      string `yaml:"name" json:"name"`
	Priority  int    `yaml:"priority,omitempty" json:"priority,omitempty"`
	Action    string `yaml:"action" json:"action"`
	PassTo    int    `yaml:"pass_to,omitempty" json:"pass_to,omitempty"` // pass: go on at priority PassTo
	Log       int    `yaml:"log,omitempty" json:"log,omitempty"`
	Scope     string `yaml:"scope,omitempty" json:"scope,omitempty"`
	Direction string `yaml:"direction,omitempty" json:"direction,omitempty"`
	Family    string `yaml:"family,omitempty" json:"family,omitempty"`
	Proto     List   `yaml:"proto,omitempty" json:"proto,omitempty"`
	Src       List   `yaml:"src,omitempty" json:"src,omitempty"`
	Dst       List   `yaml:"dst,omitempty" json:"dst,omitempty"`
	SrcPort   List   `yaml:"sport,omitempty" json:"sport,omitempty"`
	DstPort   List   `yaml:"dport,omitempty" json:"dport,omitempty"`
	ICMPType  List   `yaml:"icmp_type,omitempty" json:"icmp_type,omitempty"`
	TCPFlags  string `yaml:"tcp_flags,omitempty" json:"tcp_flags,omitempty"`
	SrcMAC    List   `yaml:"src_mac,omitempty" json:"src_mac,omitempty"`
	DstMAC    List   `yaml:"dst_mac,omitempty" json:"dst_mac,omitempty"`
	// DstNames: an allow rule from endpoints matches only destinations
	// the sending endpoint resolved through DNS for one of these names
	// ("*.example.com": every name below example.com), for the answer's
	// TTL (internal/fqdn, docs/firewall.md).
	DstNames List   `yaml:"dst_names,omitempty" json:"dst_names,omitempty"`
	Comment  string `yaml:"comment,omitempty" json:"comment,omitempty"`
}

// DefaultPriority is the priority of a rule that names none.
const DefaultPriority = 1000

// List is a field that takes one value or a list of them (YAML "80" or
// [80, 443]).
type List []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = List{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(List, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: want a value, not a %s", c.Line, kindName(c.Kind))
			}
			out = append(out, c.Value)
		}
		*l = out
		return nil
	}
	return fmt.Errorf("line %d: want a value or a list of values, not a %s", n.Line, kindName(n.Kind))
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "value"
}

// Parse reads a rule set from YAML (JSON is YAML too). Unknown fields are
// errors, so a misspelt field never silently matches everything.
func Parse(data []byte) (*RuleSet, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var rs RuleSet
	if err := dec.Decode(&rs); err != nil {
		if errors.Is(err, io.EOF) {
			return &rs, nil // an empty file: no rules
		}
		return nil, model.Fieldf("file", "%s", yamlMessage(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, model.Fieldf("file", "holds more than one YAML document")
	}
	return &rs, nil
}

// yamlMessage strips the library's prefix from a decoding error.
func yamlMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	msg = strings.ReplaceAll(msg, "in type rules.Rule", "in a rule")
	msg = strings.ReplaceAll(msg, "in type rules.RuleSet", "at the top level")
	msg = strings.ReplaceAll(msg, "in type spec.Default", "in a default")
	return msg
}

// Marshal writes rs as YAML.
func Marshal(rs *RuleSet) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(rs); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// EstablishedOn reports whether established flows skip the rules.
func (rs *RuleSet) EstablishedOn() bool { return rs.Established == nil || *rs.Established }

// Clone returns a deep copy.
func (rs *RuleSet) Clone() *RuleSet {
	out := &RuleSet{Defaults: append([]Default(nil), rs.Defaults...)}
	if rs.Established != nil {
		v := *rs.Established
		out.Established = &v
	}
	for _, r := range rs.Rules {
		out.Rules = append(out.Rules, r.Clone())
	}
	return out
}

// Clone returns a deep copy.
func (r Rule) Clone() Rule {
	c := r
	for _, l := range []*List{&c.Proto, &c.Src, &c.Dst, &c.SrcPort, &c.DstPort, &c.ICMPType, &c.SrcMAC, &c.DstMAC, &c.DstNames} {
		if *l != nil {
			*l = append(List(nil), (*l)...)
		}
	}
	return c
}

// Index returns the position of the rule called name, or -1.
func (rs *RuleSet) Index(name string) int {
	for i := range rs.Rules {
		if rs.Rules[i].Name == name {
			return i
		}
	}
	return -1
}
