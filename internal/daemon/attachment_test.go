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

// A store with network "n" (10.9.0.0/30: one endpoint address, 10.9.0.2)
// and the records given.
func attachmentStore(t *testing.T, d *Daemon, eps ...model.Endpoint) {
	t.Helper()
	err := d.store.Update(func(tx *store.Tx) error {
		n := &model.Network{Name: "n", ID: 1, Mode: model.ModeTC, MTU: 1500,
			Subnets: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/30")}, Gateways: []netip.Addr{netip.MustParseAddr("10.9.0.1")}}
		if err := tx.PutNetwork(n); err != nil {
			return err
		}
		for i := range eps {
			if err := tx.PutEndpoint(&eps[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAttachmentStatusAndLeases(t *testing.T) {
	d, _ := fakeDaemon(t)
	attachmentStore(t, d, model.Endpoint{ID: "kept", Network: "n"})
	st, err := d.AttachmentStatus("n")
	if err != nil || !st.Ready {
		t.Fatalf("status of a network with a free address: %+v %v", st, err)
	}
	if st, err := d.AttachmentStatus("none"); err != nil || st.Ready || !st.Missing || st.PodCIDRs {
		t.Errorf("status of a missing network on a node alone: %+v %v", st, err)
	}
	// The only address, leased to an endpoint that is gone (a crash
	// between the lease and the record): exhausted until released.
	lease := func(a, owner string) {
		if err := d.store.Update(func(tx *store.Tx) error { return tx.PutLease("n", netip.MustParseAddr(a), owner) }); err != nil {
			t.Fatal(err)
		}
	}
	lease("10.9.0.2", "gone")
	if st, err := d.AttachmentStatus("n"); err != nil || st.Ready || !st.Exhausted || !strings.Contains(st.Reason, "no free address") {
		t.Errorf("status of a full network: %+v %v", st, err)
	}
	n, err := d.releaseOrphanLeases()
	if err != nil || n != 1 {
		t.Fatalf("released %d leases (%v), want the orphan", n, err)
	}
	if st, _ := d.AttachmentStatus("n"); !st.Ready {
		t.Errorf("status after the release: %+v", st)
	}
	// A lease whose endpoint exists stays.
	lease("10.9.0.2", "kept")
	if n, err := d.releaseOrphanLeases(); err != nil || n != 0 {
		t.Errorf("released %d leases (%v) of a live endpoint", n, err)
	}
}

func TestAttachmentValidation(t *testing.T) {
	d, _ := fakeDaemon(t)
	attachmentStore(t, d, model.Endpoint{ID: "abc:eth0", Network: "n"})
	// A namespace of its own: xlaned's (this test's) is refused first.
	ok := api.AttachmentAdd{ContainerID: "c1", IfName: "eth0", Netns: container(t), CNINetwork: "cni", Network: "n"}
	for _, tc := range []struct {
		field string
		edit  func(*api.AttachmentAdd)
	}{
		{"container_id", func(r *api.AttachmentAdd) { r.ContainerID = "-bad id" }},
		{"ifname", func(r *api.AttachmentAdd) { r.IfName = "" }},
		{"cni_network", func(r *api.AttachmentAdd) { r.CNINetwork = "" }},
		{"netns", func(r *api.AttachmentAdd) { r.Netns = "" }},
		{"network", func(r *api.AttachmentAdd) { r.Network = "missing" }},
		{"mode", func(r *api.AttachmentAdd) { r.Create = &api.NetworkCreate{Mode: "xdp"} }},
		{"device", func(r *api.AttachmentAdd) { r.Create = &api.NetworkCreate{Device: "netkit"} }},
	} {
		req := ok
		tc.edit(&req)
		var fe *model.FieldError
		if _, err := d.AddAttachment(req); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want an error naming it", tc.field, err)
		}
	}
	// An endpoint of the attachment's ID that is not one is neither
	// taken over nor removed.
	req := ok
	req.ContainerID = "abc"
	if _, err := d.AddAttachment(req); !errors.Is(err, model.ErrConflict) {
		t.Errorf("ADD over a plain endpoint: %v, want a conflict", err)
	}
	if err := d.RemoveAttachment("abc", "eth0"); err != nil {
		t.Errorf("DEL of a plain endpoint's ID: %v", err)
	}
	if _, err := d.endpointRecord("abc:eth0"); err != nil {
		t.Errorf("the plain endpoint went: %v", err)
	}
	if _, err := d.Attachment("abc", "eth0"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("CHECK of a plain endpoint's ID: %v, want not found", err)
	}
}

func TestAttachmentID(t *testing.T) {
	if id := model.AttachmentID("0123abcd", "eth0"); id != "0123abcd:eth0" {
		t.Errorf("AttachmentID = %q", id)
	}
	long := strings.Repeat("a", 124) // with ":eth0", past 128
	id := model.AttachmentID(long, "eth0")
	if !strings.HasPrefix(id, "cni-") || len(id) > 128 || id == model.AttachmentID(long, "eth1") || !core.IDRE.MatchString(id) {
		t.Errorf("AttachmentID of a long key = %q", id)
	}
}
