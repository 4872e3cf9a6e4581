package services

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath/datapathtest"
	"github.com/xlane-dev/xlane/internal/model"
)

// A service change the datapath fails half-way (the map written, then an
// error) is rolled back: the datapath ends as the store says.
func TestServiceRollbackLeavesDatapathAsStore(t *testing.T) {
	sv, fake := fakeServices(t)
	if _, err := createService(sv, api.ServiceCreate{Name: "web", VIP: "10.96.0.1:80", Backends: []string{"10.1.0.2:8080", "10.1.0.3:8080"}}); err != nil {
		t.Fatal(err)
	}
	checkServices(t, sv, fake)

	fake.FailAfterWrite = true
	fake.Fail = datapathtest.FailOp("put-service", func(any) bool { return true })
	if _, err := createService(sv, api.ServiceCreate{Name: "db", VIP: "10.96.0.2:5432", Backends: []string{"10.1.0.4:5432"}}); !errors.Is(err, datapathtest.ErrFake) {
		t.Fatalf("CreateService = %v, want the injected failure", err)
	}
	checkServices(t, sv, fake)

	// Fail the new backend set only: the rollback's put of the old set
	// goes through.
	fake.Fail = datapathtest.FailOp("put-service", func(a any) bool { return len(a.(model.Service).Backends) == 3 })
	_, err := updateService(sv, "web", api.ServiceUpdate{Backends: []string{"10.1.0.2:8080", "10.1.0.3:8080", "10.1.0.5:8080"}})
	if !errors.Is(err, datapathtest.ErrFake) {
		t.Fatalf("UpdateService = %v, want the injected failure", err)
	}
	checkServices(t, sv, fake)
	if s, _ := sv.Get("web"); len(s.Backends) != 2 {
		t.Errorf("stored backends after a failed update: %v", s.Backends)
	}
}

// Reconcile makes the datapath's services the store's: missing
// ones are programmed, unknown ones removed.
func TestReconcileServicesOnFake(t *testing.T) {
	sv, fake := fakeServices(t)
	if _, err := createService(sv, api.ServiceCreate{Name: "web", VIP: "[fd00:96::1]:443", Backends: []string{"[fd00:1::2]:8443"}}); err != nil {
		t.Fatal(err)
	}
	stale := model.Service{ID: 99, VIP: netip.MustParseAddrPort("10.96.9.9:53"), Proto: "udp"}
	if err := fake.PutService(stale); err != nil {
		t.Fatal(err)
	}
	s, _ := sv.Get("web")
	if err := fake.DeleteService(*s); err != nil {
		t.Fatal(err)
	}
	if err := sv.Reconcile(); err != nil {
		t.Fatal(err)
	}
	checkServices(t, sv, fake)
}
