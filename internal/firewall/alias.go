package firewall

import "github.com/xlane-dev/xlane/internal/firewall/spec"

// The rule model lives in package spec (no kernel dependencies, for the
// CLI); these aliases keep this package's API in one place.
type (
	RuleSet = spec.RuleSet
	Rule    = spec.Rule
	Default = spec.Default
	List    = spec.List
)

// DefaultPriority is the priority of a rule that names none.
const DefaultPriority = spec.DefaultPriority

// Parse reads a rule set from YAML or JSON.
func Parse(data []byte) (*RuleSet, error) { return spec.Parse(data) }

// Marshal writes a rule set as YAML.
func Marshal(rs *RuleSet) ([]byte, error) { return spec.Marshal(rs) }
