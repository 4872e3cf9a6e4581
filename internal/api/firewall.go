package api

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// Firewall paths.
const (
	PathFirewall          = "/v1/firewall"
	PathFirewallRules     = "/v1/firewall/rules"
	PathFirewallDiff      = "/v1/firewall/diff"
	PathFirewallDDoS      = "/v1/firewall/ddos"
	PathFirewallBlocklist = "/v1/firewall/blocklist"
)

// FirewallRule is a rule (or a default policy, named default:SCOPE:DIR)
// with its counters.
type FirewallRule struct {
	rules.Rule
	// Default: a scope's default policy (Scope, Direction, Action set).
	Default bool `json:"default,omitempty"`
	// Position in evaluation order, from 1.
	Position int `json:"position"`
	// Bits: classifier bits the rule takes (0: inactive, its endpoint or
	// network is gone).
	Bits    int        `json:"bits"`
	Packets uint64     `json:"packets"`
	Bytes   uint64     `json:"bytes"`
	LastHit *time.Time `json:"last_hit,omitempty"`
}

// Firewall is the body of GET /v1/firewall: the rule set in force, in
// evaluation order, with counters.
type Firewall struct {
	// Generation counts rule-set installs; 0: none since the maps exist.
	Generation  uint64         `json:"generation"`
	Enabled     bool           `json:"enabled"`
	Established bool           `json:"established"`
	Rules       []FirewallRule `json:"rules"`
	Defaults    []FirewallRule `json:"defaults,omitempty"`
	// Classes: distinct bitmaps of the compiled set (its memory is
	// Classes x 2 KiB).
	Classes   int             `json:"classes"`
	Drops     []ReasonCounter `json:"drops,omitempty"` // firewall and DDoS drop reasons
	DDoS      rules.DDoS      `json:"ddos"`
	Blocklist int             `json:"blocklist"` // prefixes
}

// FirewallApply is the body of PUT /v1/firewall and POST
// /v1/firewall/diff.
type FirewallApply struct {
	RuleSet rules.RuleSet `json:"ruleset"`
	DryRun  bool          `json:"dry_run,omitempty"`
}

// FirewallApplied says what an apply changed (or would: dry run, diff).
type FirewallApplied struct {
	Diff       rules.Diff `json:"diff"`
	Applied    bool       `json:"applied"`
	Generation uint64     `json:"generation"`
}

// FirewallBlock is the body of POST /v1/firewall/blocklist.
type FirewallBlock struct {
	Add    []string `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// FirewallBlocklist is the blocklist's size (and, when asked, entries).
type FirewallBlocklist struct {
	Count   int      `json:"count"`
	Entries []string `json:"entries,omitempty"`
}

// Firewall returns the rule set in force with counters.
func (c *Client) Firewall(ctx context.Context) (*Firewall, error) {
	var out Firewall
	return &out, c.do(ctx, http.MethodGet, PathFirewall, nil, &out)
}

// FirewallApply replaces the rule set (atomically), or with dryRun only
// validates it and says what would change.
func (c *Client) FirewallApply(ctx context.Context, rs rules.RuleSet, dryRun bool) (*FirewallApplied, error) {
	var out FirewallApplied
	return &out, c.do(ctx, http.MethodPut, PathFirewall, FirewallApply{RuleSet: rs, DryRun: dryRun}, &out)
}

// FirewallDiff says what applying rs would change.
func (c *Client) FirewallDiff(ctx context.Context, rs rules.RuleSet) (*FirewallApplied, error) {
	var out FirewallApplied
	return &out, c.do(ctx, http.MethodPost, PathFirewallDiff, FirewallApply{RuleSet: rs}, &out)
}

// FirewallAdd adds one rule.
func (c *Client) FirewallAdd(ctx context.Context, r rules.Rule) (*FirewallRule, error) {
	var out FirewallRule
	return &out, c.do(ctx, http.MethodPost, PathFirewallRules, r, &out)
}

// FirewallRule returns one rule with its counters.
func (c *Client) FirewallRule(ctx context.Context, name string) (*FirewallRule, error) {
	var out FirewallRule
	return &out, c.do(ctx, http.MethodGet, PathFirewallRules+"/"+url.PathEscape(name), nil, &out)
}

// FirewallUpdate replaces one rule (its name may change).
func (c *Client) FirewallUpdate(ctx context.Context, name string, r rules.Rule) (*FirewallRule, error) {
	var out FirewallRule
	return &out, c.do(ctx, http.MethodPut, PathFirewallRules+"/"+url.PathEscape(name), r, &out)
}

// FirewallRemove removes a rule (a missing one is not an error).
func (c *Client) FirewallRemove(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, PathFirewallRules+"/"+url.PathEscape(name), nil, nil)
}

// FirewallDDoS returns the uplink's DDoS settings.
func (c *Client) FirewallDDoS(ctx context.Context) (*rules.DDoS, error) {
	var out rules.DDoS
	return &out, c.do(ctx, http.MethodGet, PathFirewallDDoS, nil, &out)
}

// SetFirewallDDoS replaces them.
func (c *Client) SetFirewallDDoS(ctx context.Context, d rules.DDoS) (*rules.DDoS, error) {
	var out rules.DDoS
	return &out, c.do(ctx, http.MethodPut, PathFirewallDDoS, d, &out)
}

// FirewallBlock adds and removes blocklist prefixes.
func (c *Client) FirewallBlock(ctx context.Context, b FirewallBlock) (*FirewallBlocklist, error) {
	var out FirewallBlocklist
	return &out, c.do(ctx, http.MethodPost, PathFirewallBlocklist, b, &out)
}

// FirewallBlocklist returns the blocklist's size, and up to limit entries.
func (c *Client) FirewallBlocklist(ctx context.Context, limit int) (*FirewallBlocklist, error) {
	var out FirewallBlocklist
	return &out, c.do(ctx, http.MethodGet, PathFirewallBlocklist+"?limit="+url.QueryEscape(itoa(limit)), nil, &out)
}

// FlushFirewallBlocklist empties the blocklist.
func (c *Client) FlushFirewallBlocklist(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, PathFirewallBlocklist, nil, nil)
}

func itoa(n int) string {
	if n <= 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
