// Package firewall is xlane's rule model and its compiler to the datapath's
// classifier (bpf/lib/fw.h, docs/firewall.md).
//
// A RuleSet (YAML or JSON) is validated in full by Validate, which resolves
// scopes against the node's networks and endpoints and returns a Policy or
// an error naming the rule and the field. Compile turns a Policy into the
// tables of one generation: per-field lookups yielding classes, a pool of
// class bitmaps, and the rules by bit; for the uplink also the list of a
// small set and the IPv4 tuples of a set of "protocol, /32 source,
// destination port" rules, which the uplink program tries first. Install writes a generation into
// the idle slot of the pinned maps and flips the live slot atomically, so
// packets see the old rule set or the new one, never a mix. Evaluate is a
// plain, linear reference model of the same semantics, for tests.
//
// ImportIPTables translates the common subset of iptables-save filter
// rules, naming every rule it cannot translate.
package firewall
