package store

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

func svc(name, vip, proto string) *model.Service {
	return &model.Service{Name: name, VIP: netip.MustParseAddrPort(vip), Proto: proto}
}

func lookup(t *testing.T, s *Store, vip, proto string) string {
	t.Helper()
	var name string
	if err := s.View(func(tx *Tx) error {
		var err error
		name, err = tx.ServiceByVIP(netip.MustParseAddrPort(vip), proto)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestServiceVIPIndex(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := lookup(t, s, "10.96.0.1:80", "tcp"); got != "" {
		t.Fatalf("empty store: %q", got)
	}
	must := func(f func(tx *Tx) error) {
		t.Helper()
		if err := s.Update(f); err != nil {
			t.Fatal(err)
		}
	}
	must(func(tx *Tx) error {
		for i := range 100 {
			if err := tx.PutService(svc(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d:80", i), "tcp")); err != nil {
				return err
			}
		}
		return tx.PutService(svc("v6", "[fd00::1]:53", "udp"))
	})
	for _, c := range []struct{ vip, proto, want string }{
		{"10.96.0.7:80", "tcp", "s7"}, {"10.96.0.7:80", "udp", ""}, {"10.96.0.7:81", "tcp", ""},
		{"[fd00::1]:53", "udp", "v6"}, {"[fd00::1]:53", "tcp", ""},
	} {
		if got := lookup(t, s, c.vip, c.proto); got != c.want {
			t.Errorf("ServiceByVIP(%s/%s) = %q, want %q", c.vip, c.proto, got, c.want)
		}
	}
	// Delete drops the index entry; a missing service is not an error.
	must(func(tx *Tx) error { return tx.DeleteService("s7") })
	must(func(tx *Tx) error { return tx.DeleteService("s7") })
	if got := lookup(t, s, "10.96.0.7:80", "tcp"); got != "" {
		t.Fatalf("after delete: %q", got)
	}
	// A store written before the index existed gets it built on the next write,
	// and reads without it still answer (by a scan).
	must(func(tx *Tx) error { return tx.tx.DeleteBucket(bucketServiceVIP) })
	if got := lookup(t, s, "10.96.0.8:80", "tcp"); got != "s8" {
		t.Fatalf("without index: %q", got)
	}
	must(func(tx *Tx) error { return tx.PutService(svc("new", "10.96.1.1:80", "tcp")) })
	for vip, want := range map[string]string{"10.96.0.8:80": "s8", "10.96.1.1:80": "new", "10.96.0.7:80": ""} {
		if got := lookup(t, s, vip, "tcp"); got != want {
			t.Errorf("rebuilt index: %s = %q, want %q", vip, got, want)
		}
	}
}

// TestPutServices: many services in one transaction, out of key order,
// one of them replacing a service under another VIP; records, index and
// count as one PutService each would leave them.
func TestPutServices(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(func(tx *Tx) error { return tx.PutService(svc("s7", "10.96.9.9:80", "tcp")) }); err != nil {
		t.Fatal(err)
	}
	var svcs []*model.Service
	for _, i := range []int{7, 3, 11, 0, 5} {
		svcs = append(svcs, svc(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d:80", 20-i), "tcp"))
	}
	if err := s.Update(func(tx *Tx) error { return tx.PutServices(svcs) }); err != nil {
		t.Fatal(err)
	}
	for _, v := range svcs {
		if got := lookup(t, s, v.VIP.String(), "tcp"); got != v.Name {
			t.Errorf("%s: index says %q, want %q", v.VIP, got, v.Name)
		}
	}
	if got := lookup(t, s, "10.96.9.9:80", "tcp"); got != "" {
		t.Errorf("s7's old VIP still indexed to %q", got)
	}
	if err := s.View(func(tx *Tx) error {
		n, err := tx.ServiceCount()
		if n != 5 {
			t.Errorf("%d services, want 5", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
