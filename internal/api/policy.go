package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/xlane-dev/xlane/internal/cnp"
)

// PathPolicies is standalone mode's ClusterNetworkPolicies (docs/policy.md).
const PathPolicies = "/v1/policies"

// PolicyApply is the body of PUT /v1/policies: policies created, or
// replaced by name; the others stay. All of them or none.
type PolicyApply struct {
	Policies []cnp.ClusterNetworkPolicy `json:"policies"`
	DryRun   bool                       `json:"dry_run,omitempty"`
}

// PolicyApplied says what an apply did (or would: dry run).
type PolicyApplied struct {
	Created   []string `json:"created,omitempty"`
	Updated   []string `json:"updated,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
	// Warnings: what a policy asks that xlane does not enforce, and
	// priorities shared in a tier ("NAME: spec...: ...").
	Warnings []string `json:"warnings,omitempty"`
	// Rules is the number of firewall rules of every policy now.
	Rules   int  `json:"rules"`
	Applied bool `json:"applied"`
}

// PolicyInfo is a policy as GET /v1/policies shows it.
type PolicyInfo struct {
	cnp.ClusterNetworkPolicy
	// Rules: the firewall rules it compiles to on this node now (its
	// subjects' endpoints); Warnings as in PolicyApplied.
	Rules    int    `json:"rules"`
	Warnings string `json:"warnings,omitempty"`
}

// ApplyPolicies creates or replaces the policies (dryRun: validates only).
func (c *Client) ApplyPolicies(ctx context.Context, ps []cnp.ClusterNetworkPolicy, dryRun bool) (*PolicyApplied, error) {
	var out PolicyApplied
	return &out, c.do(ctx, http.MethodPut, PathPolicies, PolicyApply{Policies: ps, DryRun: dryRun}, &out)
}

// Policies lists the policies, by name.
func (c *Client) Policies(ctx context.Context) ([]PolicyInfo, error) {
	var out []PolicyInfo
	return out, c.do(ctx, http.MethodGet, PathPolicies, nil, &out)
}

// DeletePolicy deletes a policy (a missing one: model.ErrNotFound).
func (c *Client) DeletePolicy(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, PathPolicies+"/"+url.PathEscape(name), nil, nil)
}
