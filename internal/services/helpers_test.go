package services

import (
	"reflect"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core/coretest"
	"github.com/xlane-dev/xlane/internal/datapath/datapathtest"
	"github.com/xlane-dev/xlane/internal/model"
)

// fakeServices is the services feature on a fake datapath and a private
// store: no root, no BPF, no namespaces.
func fakeServices(t testing.TB) (*Services, *datapathtest.Fake) {
	t.Helper()
	fake := datapathtest.New()
	return New(coretest.New(t, fake)), fake
}

// checkServices fails unless the fake datapath holds exactly the stored
// services.
func checkServices(t *testing.T, sv *Services, fake *datapathtest.Fake) {
	t.Helper()
	svcs, err := sv.List()
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]model.Service{}
	for i := range svcs {
		want[svcs[i].ID] = datapathtest.Programmed(svcs[i])
	}
	have, _ := fake.ServiceIDs()
	if !reflect.DeepEqual(have, want) {
		t.Errorf("datapath services %+v, store says %+v", have, want)
	}
}

// createService, updateService and applyServices call the feature as the
// server does: the request's text read into model types at the edge
// (internal/api), then the feature.
func createService(sv *Services, req api.ServiceCreate) (*model.Service, error) {
	s, err := req.Service()
	if err != nil {
		return nil, err
	}
	return sv.Create(s)
}

func updateService(sv *Services, name string, req api.ServiceUpdate) (*model.Service, error) {
	upd, err := req.Update()
	if err != nil {
		return nil, err
	}
	return sv.Update(name, upd)
}

func applyServices(sv *Services, req api.ServiceApply) (*model.ServiceApplyResult, error) {
	apply, err := req.Apply()
	if err != nil {
		return nil, err
	}
	return sv.Apply(apply)
}
