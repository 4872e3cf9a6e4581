package rules

import (
	"fmt"
	"regexp"
	"strings"
)

// The names of FQDN rules (dst_names; ClusterNetworkPolicy's domainNames).

// domainRE is ClusterNetworkPolicy's DomainName pattern (network-policy-api
// v1beta1), case-insensitive: an optional "*." and at least two labels.
var domainRE = regexp.MustCompile(`^(\*\.)?([a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.?$`)

// MaxNames is the most names a rule takes (the API's MaxItems).
const MaxNames = 25

// ValidName says why s is not a name pattern (nil: it is one).
func ValidName(s string) error {
	if len(s) > 253 {
		return fmt.Errorf("%d characters: a DNS name has at most 253", len(s))
	}
	if !domainRE.MatchString(s) {
		return fmt.Errorf("%q: want a DNS name of two labels or more (example.com), or *. and one (*.example.com: every name below it)", s)
	}
	return nil
}

// CanonicalName is a name as patterns and answers are compared: lower case,
// without a trailing dot.
func CanonicalName(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

// MatchName says whether name (canonical) matches pattern: exactly, or, for
// "*.suffix", when it ends in ".suffix" (one label or more before it).
func MatchName(pattern, name string) bool {
	pattern = CanonicalName(pattern)
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+suffix) && len(name) > len(suffix)+1
	}
	return name == pattern
}
