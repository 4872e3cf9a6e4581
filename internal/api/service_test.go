package api

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

// TestServiceRequests: the text of the service requests becomes model
// types (IPv4-mapped addresses unmapped, weight 1 by default), a bad
// field is named (with its index in an apply), and an update's null
// backends stay nil (keep them) while [] is an empty set.
func TestServiceRequests(t *testing.T) {
	s, err := ServiceCreate{Name: "web", VIP: "[::ffff:10.96.0.1]:80/udp", Backends: []string{"10.1.0.2:8080", "[::ffff:10.1.0.3]:8080@0"}, Affinity: true}.Service()
	want := model.Service{Name: "web", VIP: netip.MustParseAddrPort("10.96.0.1:80"), Proto: "udp", Affinity: true,
		Backends: []model.Backend{{Addr: netip.MustParseAddrPort("10.1.0.2:8080"), Weight: 1}, {Addr: netip.MustParseAddrPort("10.1.0.3:8080"), Weight: 0}}}
	if err != nil || !reflect.DeepEqual(s, want) {
		t.Errorf("Service() = %+v, %v; want %+v", s, err, want)
	}
	if got := BackendSpecs(s.Backends); !reflect.DeepEqual(got, []string{"10.1.0.2:8080@1", "10.1.0.3:8080@0"}) {
		t.Errorf("BackendSpecs = %q", got)
	}
	for _, c := range []struct {
		req   ServiceCreate
		field string
	}{
		{ServiceCreate{VIP: "10.96.0.1"}, "vip"},
		{ServiceCreate{VIP: "10.96.0.1:80/sctp"}, "vip"},
		{ServiceCreate{VIP: "10.96.0.1:80", Backends: []string{"nope"}}, "backends"},
		{ServiceCreate{VIP: "10.96.0.1:80", Backends: []string{"10.1.0.2:80@1000001"}}, "backends"},
	} {
		_, err := c.req.Service()
		var fe *model.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.req, err, c.field)
		}
	}
	_, err = ServiceApply{Services: []ServiceCreate{{VIP: "10.96.0.1:80"}, {VIP: "10.96.0.2:80", Backends: []string{"nope"}}}}.Apply()
	var fe *model.FieldError
	if !errors.As(err, &fe) || fe.Field != "services[1].backends" {
		t.Errorf("apply with a bad backend: %v, want services[1].backends", err)
	}
	off := false
	if u, err := (ServiceUpdate{Affinity: &off}).Update(); err != nil || u.Backends != nil || u.Affinity != &off {
		t.Errorf("update without backends: %+v, %v; want nil backends", u, err)
	}
	if u, err := (ServiceUpdate{Backends: []string{}}).Update(); err != nil || u.Backends == nil {
		t.Errorf("update with no backends: %+v, %v; want an empty set", u, err)
	}
}
