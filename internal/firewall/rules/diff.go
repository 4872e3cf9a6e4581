package rules

import (
	"fmt"
	"reflect"
	"strings"
)

// Change is one difference between two rule sets.
type Change struct {
	Op     string   `json:"op"` // add, remove, change
	Name   string   `json:"name"`
	Fields []string `json:"fields,omitempty"` // change: the fields that differ
	Old    *Rule    `json:"old,omitempty"`
	New    *Rule    `json:"new,omitempty"`
}

// Diff is what applying a rule set would change.
type Diff struct {
	Changes     []Change `json:"changes,omitempty"`
	Unchanged   int      `json:"unchanged"`
	Defaults    bool     `json:"defaults_changed,omitempty"`
	Established bool     `json:"established_changed,omitempty"`
	// Reordered: the same rules, in another evaluation order.
	Reordered bool `json:"reordered,omitempty"`
}

// Empty reports whether nothing would change.
func (d Diff) Empty() bool {
	return len(d.Changes) == 0 && !d.Defaults && !d.Established && !d.Reordered
}

// Compare returns what changes from old to new, rule by rule (by name).
func Compare(old, new *RuleSet) Diff {
	var d Diff
	if old == nil {
		old = &RuleSet{}
	}
	before := map[string]*Rule{}
	var oldOrder, newOrder []string
	for i := range old.Rules {
		before[old.Rules[i].Name] = &old.Rules[i]
		oldOrder = append(oldOrder, old.Rules[i].Name)
	}
	after := map[string]bool{}
	for i := range new.Rules {
		r := &new.Rules[i]
		after[r.Name] = true
		o, ok := before[r.Name]
		switch {
		case !ok:
			d.Changes = append(d.Changes, Change{Op: "add", Name: r.Name, New: r})
		case !reflect.DeepEqual(normal(*o), normal(*r)):
			d.Changes = append(d.Changes, Change{Op: "change", Name: r.Name, Old: o, New: r, Fields: changedFields(*o, *r)})
		default:
			d.Unchanged++
			newOrder = append(newOrder, r.Name)
		}
	}
	for i := range old.Rules {
		if !after[old.Rules[i].Name] {
			d.Changes = append(d.Changes, Change{Op: "remove", Name: old.Rules[i].Name, Old: &old.Rules[i]})
		}
	}
	// Same rules, other order (priorities equal, positions moved).
	var kept []string
	for _, n := range oldOrder {
		if after[n] && !changed(d.Changes, n) {
			kept = append(kept, n)
		}
	}
	d.Reordered = len(d.Changes) == 0 && !reflect.DeepEqual(kept, newOrder)
	d.Defaults = !reflect.DeepEqual(normalDefaults(old.Defaults), normalDefaults(new.Defaults))
	d.Established = old.EstablishedOn() != new.EstablishedOn()
	return d
}

func changed(cs []Change, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}

func normalDefaults(ds []Default) []Default {
	if len(ds) == 0 {
		return nil
	}
	return ds
}

// normal makes empty and missing lists compare equal.
func normal(r Rule) Rule {
	for _, l := range []*List{&r.Proto, &r.Src, &r.Dst, &r.SrcPort, &r.DstPort, &r.ICMPType, &r.SrcMAC, &r.DstMAC, &r.DstNames} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	if r.Priority == 0 {
		r.Priority = DefaultPriority
	}
	return r
}

func changedFields(a, b Rule) []string {
	a, b = normal(a), normal(b)
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			out = append(out, name)
		}
	}
	return out
}

// String describes the diff for people, one line per change.
func (d Diff) String() string {
	if d.Empty() {
		return "no changes\n"
	}
	var b strings.Builder
	for _, c := range d.Changes {
		switch c.Op {
		case "add":
			fmt.Fprintf(&b, "+ %s: %s\n", c.Name, Summary(*c.New))
		case "remove":
			fmt.Fprintf(&b, "- %s: %s\n", c.Name, Summary(*c.Old))
		default:
			fmt.Fprintf(&b, "~ %s (%s)\n    was: %s\n    now: %s\n", c.Name, strings.Join(c.Fields, ", "), Summary(*c.Old), Summary(*c.New))
		}
	}
	if d.Reordered {
		b.WriteString("~ rule order changes\n")
	}
	if d.Defaults {
		b.WriteString("~ default policies change\n")
	}
	if d.Established {
		b.WriteString("~ established flows: the setting changes\n")
	}
	fmt.Fprintf(&b, "%d rule(s) unchanged\n", d.Unchanged)
	return b.String()
}

// Summary is a one-line description of r, iptables-like.
func Summary(r Rule) string {
	var p []string
	p = append(p, r.Action)
	if r.PassTo > 0 {
		p = append(p, fmt.Sprintf("to priority %d", r.PassTo))
	}
	if r.Log > 0 && r.Action != "log" {
		p = append(p, fmt.Sprintf("log 1/%d", r.Log))
	}
	scope := r.Scope
	if scope == "" {
		scope = "all"
	}
	if r.Direction != "" {
		scope += " " + r.Direction
	}
	p = append(p, scope)
	add := func(name string, l List) {
		if len(l) > 0 {
			p = append(p, name+" "+strings.Join(l, ","))
		}
	}
	if r.Family != "" {
		p = append(p, r.Family)
	}
	add("proto", r.Proto)
	add("src", r.Src)
	add("dst", r.Dst)
	add("sport", r.SrcPort)
	add("dport", r.DstPort)
	add("icmp", r.ICMPType)
	if r.TCPFlags != "" {
		p = append(p, "flags "+r.TCPFlags)
	}
	add("src_mac", r.SrcMAC)
	add("dst_mac", r.DstMAC)
	add("dst_names", r.DstNames)
	if r.Priority != 0 {
		p = append(p, fmt.Sprintf("priority %d", r.Priority))
	}
	return strings.Join(p, " ")
}
