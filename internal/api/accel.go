package api

import (
	"context"
	"net/http"

	"github.com/xlane-dev/xlane/internal/accel"
)

// PathAccel is the API path of socket acceleration.
const PathAccel = "/v1/accel"

// AccelEnable is POST /v1/accel: run the self-test, then accelerate.
type AccelEnable struct {
	// Cgroup: a cgroup2 path (absolute, or relative to the cgroup2
	// mount); empty: xlane's own, "xlane", created if missing. The root
	// cgroup is refused.
	Cgroup string `json:"cgroup,omitempty"`
	// Nets: CIDRs both ends must be in; empty: loopback only.
	Nets []string `json:"nets,omitempty"`
	// Ports: one end's port must be one of them; empty: any.
	Ports []uint16 `json:"ports,omitempty"`
}

// AccelStatus is GET /v1/accel.
type AccelStatus struct {
	// State: "off", "on", "testing" (the self-test runs), or "failed"
	// (wanted on, but the self-test failed on this kernel: Reason).
	State    string        `json:"state"`
	Reason   string        `json:"reason,omitempty"`
	Config   *accel.Config `json:"config,omitempty"`
	SelfTest *accel.Report `json:"self_test,omitempty"`
	// Sockets in the socket map now (both ends of each accelerated
	// connection, and ones that fell back but are still open).
	Sockets  int               `json:"sockets"`
	Counters map[string]uint64 `json:"counters,omitempty"`
}

func (c *Client) EnableAccel(ctx context.Context, req AccelEnable) (*AccelStatus, error) {
	var out AccelStatus
	return &out, c.do(ctx, http.MethodPost, PathAccel, req, &out)
}

func (c *Client) DisableAccel(ctx context.Context) (*AccelStatus, error) {
	var out AccelStatus
	return &out, c.do(ctx, http.MethodDelete, PathAccel, nil, &out)
}

func (c *Client) AccelStatus(ctx context.Context) (*AccelStatus, error) {
	var out AccelStatus
	return &out, c.do(ctx, http.MethodGet, PathAccel, nil, &out)
}
