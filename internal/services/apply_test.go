package services

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath/datapathtest"
	"github.com/xlane-dev/xlane/internal/model"
)

func applySvc(name, vip string, backends ...string) api.ServiceCreate {
	return api.ServiceCreate{Name: name, VIP: vip, Backends: backends}
}

// TestApplyServices: create, update, leave alone and prune in one call;
// bad input names its field and changes nothing.
func TestApplyServices(t *testing.T) {
	sv, fake := fakeServices(t)
	res, err := applyServices(sv, api.ServiceApply{Services: []api.ServiceCreate{
		applySvc("a", "10.96.0.1:80", "10.1.0.2:8080"),
		applySvc("b", "10.96.0.2:80/udp", "10.1.0.3:53", "10.1.0.4:53@0"),
		applySvc("c", "[fd00:96::3]:443", "[fd00:1::5]:8443"),
	}})
	if err != nil || *res != (model.ServiceApplyResult{Created: 3, Services: 3}) {
		t.Fatalf("apply = %+v, %v", res, err)
	}
	checkServices(t, sv, fake)
	res, err = applyServices(sv, api.ServiceApply{Prune: true, Services: []api.ServiceCreate{
		applySvc("a", "10.96.0.1:80", "10.1.0.2:8080"),                            // unchanged
		applySvc("b", "10.96.0.2:80/udp", "10.1.0.3:53"),                          // updated
		applySvc("d", "10.96.0.4:80", "10.1.0.6:8080"),                            // created; c pruned
		applySvc("e", "[fd00:96::3]:443", "[fd00:1::7]:8443", "[fd00:1::8]:8443"), // c's VIP, c pruned
	}})
	if err != nil || *res != (model.ServiceApplyResult{Created: 2, Updated: 1, Unchanged: 1, Deleted: 1, Services: 4}) {
		t.Fatalf("apply --prune = %+v, %v", res, err)
	}
	checkServices(t, sv, fake)
	if _, err := sv.Get("c"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("pruned service c: %v", err)
	}
	// An incremental apply: d updated, e deleted and its VIP taken by h,
	// a deleted (twice) and a missing name deleted, nothing pruned.
	res, err = applyServices(sv, api.ServiceApply{Services: []api.ServiceCreate{
		applySvc("d", "10.96.0.4:80", "10.1.0.9:8080"),
		applySvc("h", "[fd00:96::3]:443", "[fd00:1::9]:8443"),
	}, Delete: []string{"e", "a", "a", "missing"}})
	if err != nil || *res != (model.ServiceApplyResult{Created: 1, Updated: 1, Deleted: 2, Services: 3}) {
		t.Fatalf("apply with delete = %+v, %v", res, err)
	}
	checkServices(t, sv, fake)
	for _, gone := range []string{"a", "e"} {
		if _, err := sv.Get(gone); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("deleted service %s: %v", gone, err)
		}
	}
	if _, err := applyServices(sv, api.ServiceApply{Services: []api.ServiceCreate{applySvc("b", "10.96.0.2:80/udp")}, Delete: []string{"b"}}); err == nil || !strings.Contains(err.Error(), "delete[0]") {
		t.Errorf("a service both listed and deleted: %v, want an error naming delete[0]", err)
	}
	for _, c := range []struct {
		name string
		req  []api.ServiceCreate
		want string
	}{
		{"bad backend", []api.ServiceCreate{applySvc("f", "10.96.0.9:80", "10.1.0.2:8080"), applySvc("g", "10.96.0.8:80", "nope")}, "services[1]"},
		{"name twice", []api.ServiceCreate{applySvc("f", "10.96.0.9:80"), applySvc("f", "10.96.0.8:80")}, "services[1].name"},
		{"vip twice", []api.ServiceCreate{applySvc("f", "10.96.0.9:80"), applySvc("g", "10.96.0.9:80")}, "services[1].vip"},
		{"another's vip", []api.ServiceCreate{applySvc("f", "10.96.0.9:80"), applySvc("g", "10.96.0.2:80/udp")}, `service "b"`},
		{"vip changed", []api.ServiceCreate{applySvc("f", "10.96.0.9:80"), applySvc("b", "10.96.0.7:80/udp")}, "remove it first"},
	} {
		if _, err := applyServices(sv, api.ServiceApply{Services: c.req}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
		if _, err := sv.Get("f"); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("%s: service f exists after a refused apply", c.name)
		}
		checkServices(t, sv, fake)
	}
}

// TestApplyServicesAtomic fails the datapath at every step of an apply
// (the write done or not) and wants store and datapath as before each
// time: nothing half-applied.
func TestApplyServicesAtomic(t *testing.T) {
	sv, fake := fakeServices(t)
	var base []api.ServiceCreate
	for i := 0; i < 6; i++ {
		base = append(base, applySvc(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.1.%d:80", i+1), fmt.Sprintf("10.1.1.%d:8080", i+1)))
	}
	if _, err := applyServices(sv, api.ServiceApply{Services: base}); err != nil {
		t.Fatal(err)
	}
	// s0-s2 updated, s3-s5 pruned, n0-n2 created.
	next := []api.ServiceCreate{}
	for i := 0; i < 3; i++ {
		next = append(next, applySvc(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.1.%d:80", i+1), "10.1.9.9:8080"),
			applySvc(fmt.Sprintf("n%d", i), fmt.Sprintf("10.96.2.%d:80", i+1), "10.1.9.8:8080"))
	}
	before, _ := fake.ServiceIDs()
	// Six puts (three updated, three created), three deletes (pruned).
	for op, calls := range map[string]int{"put-service": 6, "delete-service": 3} {
		for k := 0; k < calls; k++ {
			for _, after := range []bool{false, true} {
				n := 0
				fake.FailAfterWrite = after
				fake.Fail = datapathtest.FailOp(op, func(any) bool { n++; return n == k+1 })
				_, err := applyServices(sv, api.ServiceApply{Services: next, Prune: true})
				fake.Fail = nil
				if !errors.Is(err, datapathtest.ErrFake) {
					t.Fatalf("%s #%d (written %v): apply = %v, want the injected failure", op, k+1, after, err)
				}
				checkServices(t, sv, fake)
				if have, _ := fake.ServiceIDs(); len(have) != len(before) {
					t.Fatalf("%s #%d (written %v): %d services in the datapath, want %d", op, k+1, after, len(have), len(before))
				}
				for _, s := range base {
					got, err := sv.Get(s.Name)
					if err != nil || got.Backends[0].Addr.String() != s.Backends[0] {
						t.Fatalf("%s #%d (written %v): %s after a failed apply: %+v, %v", op, k+1, after, s.Name, got, err)
					}
				}
			}
		}
	}
	if _, err := applyServices(sv, api.ServiceApply{Services: next, Prune: true}); err != nil {
		t.Fatal(err)
	}
	checkServices(t, sv, fake)
	if have, _ := fake.ServiceIDs(); len(have) != 6 {
		t.Errorf("%d services after the apply, want 6", len(have))
	}
}

// TestApplyServicesPrunePrefix: a prune limited to a name prefix removes
// only the unlisted services of that prefix, and a VIP held by a service
// outside it is still a conflict.
func TestApplyServicesPrunePrefix(t *testing.T) {
	sv, fake := fakeServices(t)
	if _, err := applyServices(sv, api.ServiceApply{Services: []api.ServiceCreate{
		applySvc("user", "10.96.0.1:80", "10.1.0.2:8080"),
		applySvc("k8s.a", "10.96.0.2:80", "10.1.0.3:8080"),
		applySvc("k8s.b", "10.96.0.3:80", "10.1.0.4:8080"),
	}}); err != nil {
		t.Fatal(err)
	}
	res, err := applyServices(sv, api.ServiceApply{Prune: true, PrunePrefix: "k8s.", Services: []api.ServiceCreate{
		applySvc("k8s.a", "10.96.0.2:80", "10.1.0.3:8080"),
		applySvc("k8s.c", "10.96.0.3:80", "10.1.0.5:8080"), // b's VIP: b is pruned
	}})
	if err != nil || *res != (model.ServiceApplyResult{Created: 1, Unchanged: 1, Deleted: 1, Services: 3}) {
		t.Fatalf("apply = %+v, %v", res, err)
	}
	checkServices(t, sv, fake)
	if _, err := sv.Get("user"); err != nil {
		t.Errorf("service outside the prefix: %v", err)
	}
	if _, err := applyServices(sv, api.ServiceApply{Prune: true, PrunePrefix: "k8s.", Services: []api.ServiceCreate{
		applySvc("k8s.d", "10.96.0.1:80", "10.1.0.6:8080"),
	}}); err == nil || !strings.Contains(err.Error(), `service "user"`) {
		t.Errorf("the VIP of a service outside the prefix: %v, want a conflict naming it", err)
	}
}

// tenKServices is a fake daemon with 10,000 services of two backends each
// applied (k8s.default.sN.tcp80.c0), and the services.
// The services are model types, as Kubernetes mode's controller hands
// them to the daemon: no text to read.
func tenKServices(b *testing.B) (*Services, []model.Service) {
	b.Helper()
	sv, _ := fakeServices(b)
	req := make([]api.ServiceCreate, 10000)
	for i := range req {
		req[i] = applySvc(fmt.Sprintf("k8s.default.s%d.tcp80.c0", i), fmt.Sprintf("10.96.%d.%d:80", i/250, i%250+1),
			fmt.Sprintf("10.244.%d.%d:8080@1", i/250, i%250+1), fmt.Sprintf("10.245.%d.%d:8080@1", i/250, i%250+1))
	}
	apply, err := api.ServiceApply{Services: req, Prune: true, PrunePrefix: "k8s."}.Apply()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sv.Apply(apply); err != nil {
		b.Fatal(err)
	}
	return sv, apply.Services
}

// BenchmarkApplyServicesOneChange: a full-set apply of 10,000 services
// of which one changed, as Kubernetes mode's sync sends after an
// EndpointSlice update (the store read and compare of the 9,999 others is
// the cost; the fake datapath's is nothing).
func BenchmarkApplyServicesOneChange(b *testing.B) {
	sv, svcs := tenKServices(b)
	n := 0
	for b.Loop() {
		n++
		svcs[0].Backends[1].Weight = uint32((n + 1) % 2)
		res, err := sv.Apply(model.ServiceApply{Services: svcs, Prune: true, PrunePrefix: "k8s."})
		if err != nil || res.Updated != 1 || res.Unchanged != 9999 {
			b.Fatalf("apply = %+v, %v", res, err)
		}
	}
}

// BenchmarkApplyServicesIncremental: one change among 10,000 services, the
// way Kubernetes mode's incremental sync applies it (the changed service
// alone, no prune).
func BenchmarkApplyServicesIncremental(b *testing.B) {
	sv, svcs := tenKServices(b)
	n := 0
	for b.Loop() {
		n++
		svcs[0].Backends[1].Weight = uint32((n + 1) % 2)
		res, err := sv.Apply(model.ServiceApply{Services: svcs[:1]})
		if err != nil || res.Updated != 1 {
			b.Fatalf("apply = %+v, %v", res, err)
		}
	}
}
