package store

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestProxyRedirectKeys: two inbound redirects of one port in two network
// namespaces are two records; a record written under its port alone (before
// keys) is listed, and replaced or deleted by its keyed write or delete.
func TestProxyRedirectKeys(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := ProxyRecord{Port: 80, To: 15006, Direction: "in", Netns: "/run/netns/a"}
	b := ProxyRecord{Port: 80, To: 15006, Direction: "in", Netns: "/run/netns/b"}
	old := ProxyRecord{Port: 443, To: 15001, Cgroup: "/sys/fs/cgroup/xlane"}
	keys := func() []string {
		t.Helper()
		var out []string
		if err := s.View(func(tx *Tx) error {
			rs, err := tx.ProxyRedirects()
			for _, r := range rs {
				out = append(out, r.Key())
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	if err := s.Update(func(tx *Tx) error {
		bk, err := tx.sockBucket()
		if err != nil {
			return err
		}
		if err := put(bk, legacyProxyKey(old.Port), old); err != nil {
			return err
		}
		if err := tx.PutProxyRedirect(a); err != nil {
			return err
		}
		return tx.PutProxyRedirect(b)
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"in:/run/netns/a:80", "in:/run/netns/b:80", "out:/sys/fs/cgroup/xlane:443"}
	if got := keys(); !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	// Rewriting the old record moves it to its key: listed once.
	if err := s.Update(func(tx *Tx) error { return tx.PutProxyRedirect(old) }); err != nil {
		t.Fatal(err)
	}
	if got := keys(); !slices.Equal(got, want) {
		t.Fatalf("after rewriting the old record: keys %v, want %v", got, want)
	}
	if err := s.Update(func(tx *Tx) error {
		if err := tx.DeleteProxyRedirect(a); err != nil {
			return err
		}
		return tx.DeleteProxyRedirect(old)
	}); err != nil {
		t.Fatal(err)
	}
	if got := keys(); !slices.Equal(got, []string{"in:/run/netns/b:80"}) {
		t.Fatalf("after deleting a and the old record: keys %v", got)
	}
}
