package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/firewall/spec"
	"github.com/xlane-dev/xlane/internal/model"
)

// maxFirewallBody bounds firewall request bodies: a rule set of 16,384
// rules is a few MB of JSON, beyond the API's usual limit.
const maxFirewallBody = 64 << 20

// decodeLarge is decode with maxFirewallBody.
func decodeLarge(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxFirewallBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return model.Fieldf(te.Field, "has the wrong type: want %s", te.Type)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return model.Fieldf(strings.Trim(f, `"`), "unknown field")
		}
		var fe *model.FieldError
		if errors.As(err, &fe) {
			return fe
		}
		return model.Fieldf("body", "not valid JSON: %v", err)
	}
	return nil
}

// firewallRoutes registers /v1/firewall/... (docs/firewall.md) on the
// firewall daemon.New started.
func firewallRoutes(route func(pattern string, status int, fn func(*http.Request) (any, error)), d *daemon.Daemon) {
	fw := d.Firewall()
	route("GET "+api.PathFirewall, http.StatusOK, func(r *http.Request) (any, error) {
		return fw.List()
	})
	route("PUT "+api.PathFirewall, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.FirewallApply
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return fw.Apply(req.RuleSet, req.DryRun)
	})
	route("POST "+api.PathFirewallDiff, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.FirewallApply
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return fw.Diff(req.RuleSet)
	})
	route("POST "+api.PathFirewallRules, http.StatusCreated, func(r *http.Request) (any, error) {
		var req spec.Rule
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return fw.Add(req)
	})
	route("GET "+api.PathFirewallRules+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		return fw.Rule(r.PathValue("name"))
	})
	route("PUT "+api.PathFirewallRules+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		var req spec.Rule
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return fw.Update(r.PathValue("name"), req)
	})
	route("DELETE "+api.PathFirewallRules+"/{name}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, fw.Remove(r.PathValue("name"))
	})
	route("GET "+api.PathFirewallDDoS, http.StatusOK, func(r *http.Request) (any, error) {
		return fw.DDoS()
	})
	route("PUT "+api.PathFirewallDDoS, http.StatusOK, func(r *http.Request) (any, error) {
		var req spec.DDoS
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return fw.SetDDoS(req)
	})
	route("GET "+api.PathFirewallBlocklist, http.StatusOK, func(r *http.Request) (any, error) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		return fw.Blocklist(limit)
	})
	route("POST "+api.PathFirewallBlocklist, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.FirewallBlock
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return fw.Block(req)
	})
	route("DELETE "+api.PathFirewallBlocklist, http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, fw.FlushBlocklist()
	})
}
