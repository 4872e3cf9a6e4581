package server

import (
	"net/http"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
)

// policyRoutes registers /v1/policies (docs/policy.md): standalone
// ClusterNetworkPolicies, bodies as large as the firewall's.
func policyRoutes(route func(pattern string, status int, fn func(*http.Request) (any, error)), d *daemon.Daemon) {
	route("GET "+api.PathPolicies, http.StatusOK, func(r *http.Request) (any, error) {
		ps, err := d.Policies().List()
		return orEmpty(ps), err
	})
	route("PUT "+api.PathPolicies, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.PolicyApply
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return d.Policies().Apply(req)
	})
	route("DELETE "+api.PathPolicies+"/{name}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, d.Policies().Delete(r.PathValue("name"))
	})
}
