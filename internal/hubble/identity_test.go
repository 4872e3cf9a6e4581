package hubble

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/core/coretest"
	"github.com/xlane-dev/xlane/internal/datapath/datapathtest"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// TestIdentities: endpoints are named namespace = network, pod = id; a
// pod of the Kubernetes watch names its address (keeping this node's
// endpoint id); a removed endpoint keeps its names for keep, then not.
func TestIdentities(t *testing.T) {
	c := coretest.New(t, datapathtest.New())
	ep := model.Endpoint{ID: "client", Network: "shop", IPs: []netip.Addr{netip.MustParseAddr("10.84.0.3")},
		Attachment: &model.Attachment{ContainerID: "c0ffee"}}
	podEP := model.Endpoint{ID: "c1:eth0", Network: "k8s", IPs: []netip.Addr{netip.MustParseAddr("10.244.0.5")}}
	put := func(eps ...model.Endpoint) {
		t.Helper()
		if err := c.Store().Update(func(tx *store.Tx) error {
			for i := range eps {
				if err := tx.PutEndpoint(&eps[i]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	put(ep, podEP)
	pods := []model.Pod{{Name: "web-1", Namespace: "prod", Node: "n1", Labels: map[string]string{"app": "web"},
		IPs: []netip.Addr{netip.MustParseAddr("10.244.0.5")}, WorkloadKind: "ReplicaSet", WorkloadName: "web-5d8f"},
		{Name: "db-0", Namespace: "prod", Node: "n2", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.7")}}}
	ids := &identities{c: c, node: "n1", keep: 200 * time.Millisecond, pods: func() []model.Pod { return pods }}
	ids.refresh()

	id := ids.lookup(ep.IPs[0])
	if id == nil || id.namespace != "shop" || id.name != "client" || id.endpoint != "client" ||
		id.labels[0] != "xlane:container=c0ffee" || id.numeric < 256 {
		t.Fatalf("endpoint's identity %+v: want shop/client, labelled, numbered", id)
	}
	web := ids.lookup(podEP.IPs[0])
	if web == nil || web.namespace != "prod" || web.name != "web-1" || web.endpoint != "c1:eth0" ||
		web.workload != [2]string{"ReplicaSet", "web-5d8f"} || web.labels[0] != "k8s:app=web" {
		t.Fatalf("pod's identity %+v: want prod/web-1, endpoint c1:eth0, its workload and labels", web)
	}
	if db := ids.lookup(netip.MustParseAddr("10.244.1.7")); db == nil || db.name != "db-0" || db.node != "n2" {
		t.Fatalf("another node's pod %+v: want prod/db-0 on n2", db)
	}
	if ids.lookup(netip.MustParseAddr("192.0.2.9")) != nil {
		t.Fatal("an unknown address has an identity")
	}

	if err := c.Store().Update(func(tx *store.Tx) error { return tx.DeleteEndpoint("client") }); err != nil {
		t.Fatal(err)
	}
	ids.refresh()
	if id := ids.lookup(ep.IPs[0]); id == nil || id.name != "client" || id.gone.IsZero() {
		t.Fatalf("removed endpoint's identity %+v: want it kept, marked gone", id)
	}
	if present, gone := ids.size(); present != 2 || gone != 1 {
		t.Errorf("size: %d present, %d gone; want 2, 1", present, gone)
	}
	time.Sleep(250 * time.Millisecond)
	ids.refresh()
	if id := ids.lookup(ep.IPs[0]); id != nil {
		t.Fatalf("removed endpoint's identity %+v after keep: want none", id)
	}
}
