package daemon

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// checkFunc is a core.NetworkValidator of a test.
type checkFunc func(tx *store.Tx, at core.NetworkCheck, req *api.NetworkCreate, n *model.Network) error

func (f checkFunc) ValidateNetwork(tx *store.Tx, at core.NetworkCheck, req *api.NetworkCreate, n *model.Network) error {
	return f(tx, at, req, n)
}

// A feature's network check is called at each core.NetworkCheck in order,
// with what the core has resolved by then: the subnets it fills in at
// CheckDefaults are the network's, and its error at CheckShape refuses the
// network with nothing created.
func TestNetworkValidatorHook(t *testing.T) {
	inNode(t, func(d *Daemon) {
		var calls []core.NetworkCheck
		fail := false
		d.netChecks = append(d.netChecks, checkFunc(func(_ *store.Tx, at core.NetworkCheck, req *api.NetworkCreate, n *model.Network) error {
			calls = append(calls, at)
			switch at {
			case core.CheckName:
				if n != nil {
					t.Errorf("CheckName: network %+v, want none yet", n)
				}
			case core.CheckDefaults:
				if len(req.Subnets) == 0 {
					req.Subnets = []string{"10.53.0.0/24"}
				}
			case core.CheckShape:
				if !fail && (len(n.Subnets) != 1 || n.Subnets[0] != netip.MustParsePrefix("10.53.0.0/24")) {
					t.Errorf("CheckShape: subnets %v, want the default filled in at CheckDefaults", n.Subnets)
				}
				if fail {
					return model.Fieldf("mtu", "refused by the test's feature")
				}
			}
			return nil
		}))
		n, err := d.CreateNetwork(api.NetworkCreate{Name: "v"})
		if err != nil {
			t.Fatal(err)
		}
		if want := []core.NetworkCheck{core.CheckName, core.CheckDefaults, core.CheckShape}; !slices.Equal(calls, want) {
			t.Errorf("checks %v, want %v", calls, want)
		}
		if len(n.Subnets) != 1 || n.Subnets[0].String() != "10.53.0.0/24" {
			t.Errorf("network subnets %v, want the feature's default", n.Subnets)
		}
		calls, fail = nil, true
		_, err = d.CreateNetwork(api.NetworkCreate{Name: "w", Subnets: []string{"10.54.0.0/24"}})
		var fe *model.FieldError
		if !errors.As(err, &fe) || fe.Field != "mtu" {
			t.Fatalf("CreateNetwork with the feature refusing = %v, want its mtu field error", err)
		}
		if want := []core.NetworkCheck{core.CheckName, core.CheckDefaults, core.CheckShape}; !slices.Equal(calls, want) {
			t.Errorf("checks of the refused create %v, want %v", calls, want)
		}
		nets, _ := d.Networks()
		if len(nets) != 1 || nets[0].Name != "v" {
			t.Errorf("networks after a refused create: %v, want only v", nets)
		}
	})
}
