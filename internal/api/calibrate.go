package api

import (
	"context"
	"net/http"

	"github.com/xlane-dev/xlane/internal/calibrate"
)

// PathCalibration: GET the stored calibration, POST to measure anew.
const PathCalibration = "/v1/calibration"

// Calibration is what `auto` resolves to on this node and the
// measurements behind it; Choice is nil before the first calibration.
type Calibration struct {
	Choice *calibrate.Choice `json:"choice,omitempty"`
	// Running: a calibration is under way (at first start, or asked for).
	Running   bool   `json:"running,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Rule is how a calibration decides (calibrate.Rule).
	Rule string `json:"rule"`
}

// Calibrate measures the modes on this node and stores the choice.
func (c *Client) Calibrate(ctx context.Context) (*Calibration, error) {
	var out Calibration
	return &out, c.do(ctx, http.MethodPost, PathCalibration, nil, &out)
}

// Calibration returns the stored calibration.
func (c *Client) Calibration(ctx context.Context) (*Calibration, error) {
	var out Calibration
	return &out, c.do(ctx, http.MethodGet, PathCalibration, nil, &out)
}
