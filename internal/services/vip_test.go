package services

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// TestServiceVIPRefused: a VIP that is no one service's unicast address
// (0.0.0.0 would take the node's own connections to the port) is refused
// by create and apply, naming the field, and nothing is programmed.
func TestServiceVIPRefused(t *testing.T) {
	sv, fake := fakeServices(t)
	err := sv.c.Store().Update(func(tx *store.Tx) error {
		return tx.PutNetwork(&model.Network{Name: "blue", Subnets: []netip.Prefix{netip.MustParsePrefix("10.61.0.0/24")}})
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, vip := range []string{
		"0.0.0.0:80", "[::]:80", "0.0.0.1:80", "255.255.255.255:80/udp", "224.0.0.251:5353/udp", "[ff02::1]:80",
		"127.0.0.1:80", "[::1]:80", "169.254.169.254:80", "[fe80::1]:80",
		"10.61.0.255:80", "10.61.0.0:80", // network blue's subnet and broadcast addresses
	} {
		_, err := createService(sv, api.ServiceCreate{Name: "s", VIP: vip, Backends: []string{"10.1.0.2:8080"}})
		var fe *model.FieldError
		if !errors.As(err, &fe) || fe.Field != "vip" {
			t.Errorf("create VIP %s: %v, want an error of field vip", vip, err)
		}
		_, err = applyServices(sv, api.ServiceApply{Services: []api.ServiceCreate{
			applySvc("ok", "10.96.0.1:80", "10.1.0.2:8080"), applySvc("s", vip, "10.1.0.2:8080")}})
		if !errors.As(err, &fe) || !strings.Contains(fe.Field, "services[1]") && !strings.Contains(err.Error(), "services[1]") {
			t.Errorf("apply VIP %s: %v, want an error naming services[1]", vip, err)
		}
		if svcs, _ := sv.List(); len(svcs) != 0 {
			t.Errorf("VIP %s: services %v after refused requests", vip, svcs)
		}
		checkServices(t, sv, fake)
	}
	if _, err := createService(sv, api.ServiceCreate{Name: "s", VIP: "10.61.0.7:80", Backends: []string{"10.1.0.2:8080"}}); err != nil {
		t.Errorf("a VIP inside a network's subnet (not its subnet or broadcast address): %v", err)
	}
}
