package calibration

import (
	"errors"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

// A calibration's network names are its own: the prefix is refused to a
// user, and while a calibration runs only its id's names are let through.
// (Moved from internal/daemon's TestCalibrationHidden, which keeps the
// listing half.)
func TestCalibrationReserved(t *testing.T) {
	d := &Runner{}
	var fe *model.FieldError
	if err := d.Reserved(calibPrefix + "x"); !errors.As(err, &fe) || fe.Field != "name" {
		t.Errorf("a user's network named %sx: %v, want refused on name", calibPrefix, err)
	}
	d.setCalibID("abc123")
	if err := d.Reserved(calibPrefix + "abc123-tc"); err != nil {
		t.Errorf("the running calibration's own name refused: %v", err)
	}
	if err := d.Reserved(calibPrefix + "zzz999-tc"); err == nil {
		t.Errorf("another calibration's name accepted while abc123 runs")
	}
}
