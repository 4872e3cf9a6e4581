package daemon

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// A calibration's networks and endpoints are its own: user listings leave
// them out (and status counts them not), user deletes and endpoint adds do
// not reach them (that their name prefix is the running calibration's
// only: internal/calibration's TestCalibrationReserved).
func TestCalibrationHidden(t *testing.T) {
	d, _ := fakeDaemon(t)
	err := d.store.Update(func(tx *store.Tx) error {
		for _, n := range []model.Network{
			{Name: "mine", ID: 1, Subnets: []netip.Prefix{netip.MustParsePrefix("10.59.0.0/24")}},
			{Name: core.HiddenPrefix + "abc123-tc", ID: 2, Subnets: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}},
		} {
			if err := tx.PutNetwork(&n); err != nil {
				return err
			}
		}
		for _, e := range []model.Endpoint{{ID: "e-mine", Network: "mine"}, {ID: "e-cal", Network: core.HiddenPrefix + "abc123-tc"}} {
			if err := tx.PutEndpoint(&e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	nets, err := d.Networks()
	if err != nil || len(nets) != 1 || nets[0].Name != "mine" {
		t.Errorf("Networks = %+v, %v; want the user's network only", nets, err)
	}
	if _, err := d.Network(core.HiddenPrefix + "abc123-tc"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("Network(the calibration's) = %v, want not found", err)
	}
	eps, err := d.Endpoints("")
	if err != nil || len(eps) != 1 || eps[0].ID != "e-mine" {
		t.Errorf("Endpoints = %d endpoints, %v; want the user's only", len(eps), err)
	}
	if _, err := d.Endpoint("e-cal"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("Endpoint(the calibration's) = %v, want not found", err)
	}
	st, err := d.Status()
	if err != nil || st.Networks != 1 || st.Endpoints != 1 {
		t.Errorf("status counts %d networks, %d endpoints (%v); want 1 and 1", st.Networks, st.Endpoints, err)
	}
	if err := d.DeleteNetwork(core.HiddenPrefix+"abc123-tc", true); err != nil {
		t.Errorf("DeleteNetwork(the calibration's) = %v, want nil (nothing of the user's)", err)
	}
	if err := d.RemoveEndpoint("e-cal"); err != nil {
		t.Errorf("RemoveEndpoint(the calibration's) = %v, want nil (nothing of the user's)", err)
	}
	// The calibration's endpoint check (core.EndpointValidator) refuses
	// its network as if there were none.
	_, err = d.AddEndpoint(api.EndpointAdd{Network: core.HiddenPrefix + "abc123-tc", ID: "e-user", VethOnly: true})
	var fe *model.FieldError
	if !errors.As(err, &fe) || fe.Field != "network" || !strings.Contains(err.Error(), "no such network") {
		t.Errorf("AddEndpoint on the calibration's network = %v, want no such network", err)
	}
	if err := d.store.View(func(tx *store.Tx) error {
		_, err := tx.Network(core.HiddenPrefix + "abc123-tc")
		if err == nil {
			_, err = tx.Endpoint("e-cal")
		}
		return err
	}); err != nil {
		t.Errorf("a user's delete reached the calibration's network or endpoint: %v", err)
	}
}
