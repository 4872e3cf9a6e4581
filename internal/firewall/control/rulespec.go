package control

import (
	"strings"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/store"
)

// RuleSpec is the stored rule set's counter slots and actions (the
// metrics' rule counts).
type RuleSpec struct {
	Slots    map[string]uint32
	actions  map[string]string
	defaults map[[2]string]string // (scope, direction) -> action
}

// ReadRuleSpec reads it from the store.
func ReadRuleSpec(tx *store.Tx) (*RuleSpec, error) {
	slots, err := tx.FirewallSlots()
	if err != nil {
		return nil, err
	}
	rs, err := tx.FirewallRules()
	if err != nil {
		return nil, err
	}
	s := &RuleSpec{Slots: slots, actions: map[string]string{}, defaults: map[[2]string]string{}}
	for _, r := range rs.Rules {
		s.actions[r.Name] = r.Action
	}
	for _, df := range rs.Defaults {
		s.defaults[[2]string{df.Scope, df.Direction}] = df.Action
	}
	return s, nil
}

// Action names what a rule does; a default policy no rule set names
// allows.
func (s *RuleSpec) Action(name string) string {
	if a, ok := s.actions[name]; ok {
		return a
	}
	if strings.HasPrefix(name, "default:") {
		scope, dir := defaultScope(name)
		if a, ok := s.defaults[[2]string{scope, dir}]; ok {
			return a
		}
		return "allow"
	}
	return ""
}

// Counter reads the counters of a rule's slot.
func (f *Firewall) Counter(slot uint32) (firewall.Counter, error) { return f.in.Counter(slot) }
