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
	"github.com/xlane-dev/xlane/internal/vm"
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

// epCheckFunc is a core.EndpointValidator of a test.
type epCheckFunc func(tx *store.Tx, req *api.EndpointAdd, e *model.Endpoint, n *model.Network) error

func (f epCheckFunc) ValidateEndpoint(tx *store.Tx, req *api.EndpointAdd, e *model.Endpoint, n *model.Network) error {
	return f(tx, req, e, n)
}

// The features' endpoint checks run after the core's, with what the core
// and the features before them resolved (the VM feature's tap and MAC);
// one that refuses refuses the endpoint with its field and nothing
// created. The VM feature's checks are its own: VM fields on a
// container's request, a netns on a VM's (internal/vm).
func TestEndpointValidatorHook(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "v", Mode: "tc", Subnets: []string{"10.55.0.0/24"}}); err != nil {
			t.Fatal(err)
		}
		var seen []model.Endpoint
		refuse := false
		d.epChecks = append(d.epChecks, epCheckFunc(func(_ *store.Tx, req *api.EndpointAdd, e *model.Endpoint, n *model.Network) error {
			if n.Name != req.Network {
				t.Errorf("endpoint check: network %q for a request on %q", n.Name, req.Network)
			}
			seen = append(seen, *e)
			if refuse {
				return model.Fieldf("ifname", "refused by the test's feature")
			}
			return nil
		}))
		e, err := d.AddEndpoint(api.EndpointAdd{Network: "v", ID: "vm1", VM: true, IPs: []string{"10.55.0.9"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != 1 || seen[0].HostIf != vm.TapName("vm1") || seen[0].MAC == "" || !seen[0].VM ||
			!slices.Equal(seen[0].IPs, []netip.Addr{netip.MustParseAddr("10.55.0.9")}) {
			t.Errorf("the test's check saw %+v, want the VM feature's tap %s and MAC, the core's address", seen, vm.TapName("vm1"))
		}
		if e.HostIf != vm.TapName("vm1") {
			t.Errorf("VM endpoint's device %s, want its tap %s", e.HostIf, vm.TapName("vm1"))
		}
		links := xlaneLinks(t)
		refuse = true
		_, err = d.AddEndpoint(api.EndpointAdd{Network: "v", ID: "c1", VethOnly: true})
		var fe *model.FieldError
		if !errors.As(err, &fe) || fe.Field != "ifname" {
			t.Fatalf("AddEndpoint with the feature refusing = %v, want its ifname field error", err)
		}
		if after := xlaneLinks(t); !slices.Equal(after, links) {
			t.Errorf("links after a refused add: %v, want %v", after, links)
		}
		refuse = false
		for _, c := range []struct {
			req   api.EndpointAdd
			field string
		}{
			{api.EndpointAdd{Network: "v", VethOnly: true, Queues: 2}, "queues"},
			{api.EndpointAdd{Network: "v", VethOnly: true, Backend: "tap"}, "backend"},
			{api.EndpointAdd{Network: "v", VM: true, Netns: "x"}, "netns"},
		} {
			_, err := d.AddEndpoint(c.req)
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("AddEndpoint(%+v) = %v, want a %s field error", c.req, err, c.field)
			}
		}
		if eps, _ := d.Endpoints(""); len(eps) != 1 {
			t.Errorf("endpoints after the refused adds: %d, want 1", len(eps))
		}
	})
}
