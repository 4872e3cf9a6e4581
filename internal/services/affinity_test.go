package services

import (
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestServiceAffinityTimeout: the timeout reaches the datapath (10800
// when not given), a change of it alone is an update, bad values name
// affinity_timeout and change nothing.
func TestServiceAffinityTimeout(t *testing.T) {
	sv, fake := fakeServices(t)
	dpTimeout := func(name string) int {
		t.Helper()
		s, err := sv.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		have, _ := fake.ServiceIDs()
		return have[s.ID].AffinityTimeout
	}
	if _, err := createService(sv, api.ServiceCreate{Name: "a", VIP: "10.96.0.1:80", Backends: []string{"10.1.0.2:8080"}, Affinity: true}); err != nil {
		t.Fatal(err)
	}
	if got := dpTimeout("a"); got != model.DefaultAffinityTimeout {
		t.Errorf("affinity without a timeout: datapath timeout %d, want %d", got, model.DefaultAffinityTimeout)
	}
	if _, err := createService(sv, api.ServiceCreate{Name: "b", VIP: "10.96.0.2:80", Backends: []string{"10.1.0.2:8080"}}); err != nil {
		t.Fatal(err)
	}
	if got := dpTimeout("b"); got != 0 {
		t.Errorf("no affinity: datapath timeout %d, want 0", got)
	}
	res, err := applyServices(sv, api.ServiceApply{Services: []api.ServiceCreate{
		{Name: "a", VIP: "10.96.0.1:80", Backends: []string{"10.1.0.2:8080"}, Affinity: true, AffinityTimeout: 60},
		{Name: "b", VIP: "10.96.0.2:80", Backends: []string{"10.1.0.2:8080"}},
	}})
	if err != nil || res.Updated != 1 || res.Unchanged != 1 {
		t.Fatalf("apply of a timeout change: %+v, %v; want a updated, b unchanged", res, err)
	}
	if got := dpTimeout("a"); got != 60 {
		t.Errorf("after the apply: datapath timeout %d, want 60", got)
	}
	checkServices(t, sv, fake)
	for _, req := range []api.ServiceCreate{
		{Name: "c", VIP: "10.96.0.3:80", Affinity: true, AffinityTimeout: -1},
		{Name: "c", VIP: "10.96.0.3:80", Affinity: true, AffinityTimeout: model.MaxAffinityTimeout + 1},
		{Name: "c", VIP: "10.96.0.3:80", AffinityTimeout: 60},
	} {
		if _, err := createService(sv, req); err == nil || !strings.Contains(err.Error(), "affinity_timeout") {
			t.Errorf("create %+v: %v, want an error naming affinity_timeout", req, err)
		}
	}
	// An update of the timeout alone keeps the backends; affinity off
	// drops the timeout.
	s, err := updateService(sv, "a", api.ServiceUpdate{AffinityTimeout: ptrInt(120)})
	if err != nil || s.AffinityTimeout != 120 || len(s.Backends) != 1 || dpTimeout("a") != 120 {
		t.Fatalf("update the timeout: %+v, %v", s, err)
	}
	off := false
	if s, err = updateService(sv, "a", api.ServiceUpdate{Affinity: &off}); err != nil || s.AffinityTimeout != 0 || dpTimeout("a") != 0 {
		t.Fatalf("affinity off: %+v, %v", s, err)
	}
	if _, err := updateService(sv, "a", api.ServiceUpdate{AffinityTimeout: ptrInt(30)}); err == nil || !strings.Contains(err.Error(), "affinity_timeout") {
		t.Errorf("a timeout without affinity: %v, want an error naming affinity_timeout", err)
	}
	checkServices(t, sv, fake)
}

func ptrInt(v int) *int { return &v }
