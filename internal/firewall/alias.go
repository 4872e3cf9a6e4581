package firewall

import "github.com/xlane-dev/xlane/internal/firewall/rules"

// The rule model lives in package rules (no kernel dependencies, for the
// CLI); these aliases keep this package's API in one place.
type (
	RuleSet = rules.RuleSet
	Rule    = rules.Rule
	Default = rules.Default
	List    = rules.List
)

// DefaultPriority is the priority of a rule that names none.
const DefaultPriority = rules.DefaultPriority

// Parse reads a rule set from YAML or JSON.
func Parse(data []byte) (*RuleSet, error) { return rules.Parse(data) }

// Marshal writes a rule set as YAML.
func Marshal(rs *RuleSet) ([]byte, error) { return rules.Marshal(rs) }
