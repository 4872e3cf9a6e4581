package daemon

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Ports published on one host address (Kubernetes' hostPort with a
// hostIP): the same node port and protocol on different host addresses,
// or another protocol, coexist (one datapath entry each, in the host
// address's family); on the same address, or against a mapping on every
// address, they conflict; a host address of a family the endpoint has no
// address in is refused naming the field.
func TestPublishPortsHostIP(t *testing.T) {
	d, fake := fakeDaemon(t)
	n := &model.Network{Name: "n", ID: 1, Mode: model.ModeTC, Masquerade: true, MTU: 1500, Device: "xlnet1",
		Subnets:  []netip.Prefix{netip.MustParsePrefix("10.50.0.0/24"), netip.MustParsePrefix("fd00:50::/64")},
		Gateways: []netip.Addr{netip.MustParseAddr("10.50.0.1"), netip.MustParseAddr("fd00:50::1")}, Created: time.Now()}
	eps := []*model.Endpoint{
		{ID: "e1", Network: "n", IfName: "eth0", IPs: []netip.Addr{netip.MustParseAddr("10.50.0.2"), netip.MustParseAddr("fd00:50::2")}},
		{ID: "e2", Network: "n", IfName: "eth0", IPs: []netip.Addr{netip.MustParseAddr("10.50.0.3")}},
		{ID: "e3", Network: "n", IfName: "eth0", IPs: []netip.Addr{netip.MustParseAddr("10.50.0.4")}},
	}
	if err := d.store.Update(func(tx *store.Tx) error {
		if err := tx.PutNetwork(n); err != nil {
			return err
		}
		for _, e := range eps {
			e.HostIf, e.PeerIf = hostIfNames(e.ID)
			if err := tx.PutEndpoint(e); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	publish := func(id string, ports ...string) error {
		_, err := d.PublishPorts(id, api.PortsUpdate{Ports: ports}, false)
		return err
	}
	if err := publish("e1", "127.0.0.1:54323:80"); err != nil {
		t.Fatal(err)
	}
	if err := publish("e2", "192.0.2.2:54323:80", "192.0.2.2:54323:80/udp"); err != nil {
		t.Fatalf("the same port on another host address and protocol: %v", err)
	}
	for _, c := range []struct{ id, port string }{
		{"e3", "192.0.2.2:54323:80"}, // e2's
		{"e3", "54323:80"},           // every address: e1's and e2's
	} {
		if err := publish(c.id, c.port); !errors.Is(err, model.ErrConflict) {
			t.Errorf("%s %s: %v, want a conflict", c.id, c.port, err)
		}
	}
	var fe *model.FieldError
	if err := publish("e2", "[fd00::1]:80:80"); !errors.As(err, &fe) || fe.Field != "ports" {
		t.Errorf("an IPv6 host address for an IPv4-only endpoint: %v, want a ports field error", err)
	}
	checkPorts(t, d, fake)
	ps, _ := fake.PublishedPorts()
	want := []datapath.Port{
		{Proto: 6, NodePort: 54323, Addr: netip.MustParseAddr("10.50.0.2"), Port: 80, HostIP: netip.MustParseAddr("127.0.0.1")},
		{Proto: 6, NodePort: 54323, Addr: netip.MustParseAddr("10.50.0.3"), Port: 80, HostIP: netip.MustParseAddr("192.0.2.2")},
		{Proto: 17, NodePort: 54323, Addr: netip.MustParseAddr("10.50.0.3"), Port: 80, HostIP: netip.MustParseAddr("192.0.2.2")},
	}
	for _, w := range want {
		if !slices.Contains(ps, w) {
			t.Errorf("published %v, missing %v", ps, w)
		}
	}
	if len(ps) != len(want) {
		t.Errorf("published %v, want %v (no entry of the other family)", ps, want)
	}
}
