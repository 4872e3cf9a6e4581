package store

import (
	"encoding/json"
	"fmt"

	"github.com/xlane-dev/xlane/internal/calibrate"
)

// calibration: "choice" -> calibrate.Choice (JSON): what `auto` resolves to
// on this node, measured by xlane calibrate or at first start; "running" ->
// the id in the names of what a calibration under way makes.
var bucketCalibration = []byte("calibration")

// Calibration returns the stored choice, or nil before the first
// calibration.
func (t *Tx) Calibration() (*calibrate.Choice, error) {
	b, err := t.fwBucket(bucketCalibration)
	if err != nil || b == nil {
		return nil, err
	}
	raw := b.Get([]byte("choice"))
	if raw == nil {
		return nil, nil
	}
	var c calibrate.Choice
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("decode calibration: %w", err)
	}
	return &c, nil
}

// PutCalibration stores c.
func (t *Tx) PutCalibration(c *calibrate.Choice) error {
	b, err := t.fwBucket(bucketCalibration)
	if err != nil {
		return err
	}
	return put(b, "choice", c)
}

// CalibrationRunning returns the id of a calibration under way (or one a
// kill interrupted), "" when none.
func (t *Tx) CalibrationRunning() (string, error) {
	b, err := t.fwBucket(bucketCalibration)
	if err != nil || b == nil {
		return "", err
	}
	return string(b.Get([]byte("running"))), nil
}

// PutCalibrationRunning records id ("" clears it).
func (t *Tx) PutCalibrationRunning(id string) error {
	b, err := t.fwBucket(bucketCalibration)
	if err != nil {
		return err
	}
	if id == "" {
		return b.Delete([]byte("running"))
	}
	return b.Put([]byte("running"), []byte(id))
}
