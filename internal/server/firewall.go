package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// decodeLarge is decode within maxFirewallBody.
func decodeLarge(r *http.Request, v any) error { return decodeSized(r, v, maxFirewallBody) }

// decodeSized is decode of a body limited to limit (limitBody).
func decodeSized(r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeErr(err, limit)
	}
	return nil
}

// decodeApply decodes a rule set, refusing one with more rules than the
// datapath holds before decoding its rules (limit.go).
func decodeApply(r *http.Request, v *api.FirewallApply) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return decodeErr(err, maxFirewallBody)
	}
	var shape struct {
		RuleSet struct {
			Rules json.RawMessage `json:"rules"`
		} `json:"ruleset"`
	}
	if json.Unmarshal(body, &shape) == nil {
		if err := checkRuleCount(shape.RuleSet.Rules); err != nil {
			return err
		}
	}
	shape.RuleSet.Rules = nil
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeErr(err, maxFirewallBody)
	}
	return nil
}

// firewallRoutes registers /v1/firewall/... (docs/firewall.md) on the
// firewall the daemon started (daemon.Start).
func firewallRoutes(route func(pattern string, status int, fn func(*http.Request) (any, error)), d *daemon.Daemon) {
	fw := d.Firewall()
	route("GET "+api.PathFirewall, http.StatusOK, func(r *http.Request) (any, error) {
		return fw.List()
	})
	route("PUT "+api.PathFirewall, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.FirewallApply
		if err := decodeApply(r, &req); err != nil {
			return nil, err
		}
		return fw.Apply(req.RuleSet, req.DryRun)
	})
	route("POST "+api.PathFirewallDiff, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.FirewallApply
		if err := decodeApply(r, &req); err != nil {
			return nil, err
		}
		return fw.Diff(req.RuleSet)
	})
	route("POST "+api.PathFirewallRules, http.StatusCreated, func(r *http.Request) (any, error) {
		var req rules.Rule
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return fw.Add(req)
	})
	route("GET "+api.PathFirewallRules+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		return fw.Rule(r.PathValue("name"))
	})
	route("PUT "+api.PathFirewallRules+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		var req rules.Rule
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
		var req rules.DDoS
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
