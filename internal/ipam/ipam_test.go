package ipam

import (
	"errors"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

func testNet() *model.Network {
	return &model.Network{
		Name:     "n",
		Subnets:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/29"), netip.MustParsePrefix("fd00::/126")},
		Gateways: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
	}
}

func alloc(t *testing.T, st *store.Store, owner string, req ...netip.Addr) ([]netip.Addr, error) {
	t.Helper()
	var got []netip.Addr
	err := st.Update(func(tx *store.Tx) error {
		var err error
		got, err = Allocate(tx, testNet(), owner, req)
		return err
	})
	return got, err
}

func TestAllocateNeverTwiceAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := alloc(t, st, "a")
	if err != nil || a[0] != netip.MustParseAddr("10.0.0.2") || a[1] != netip.MustParseAddr("fd00::2") {
		t.Fatalf("first = %v, %v; want 10.0.0.2 fd00::2", a, err)
	}
	st.Close()
	st, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := alloc(t, st, "b")
	if err != nil || b[0] != netip.MustParseAddr("10.0.0.3") || b[1] != netip.MustParseAddr("fd00::3") {
		t.Fatalf("after reopen = %v, %v; want 10.0.0.3 fd00::3", b, err)
	}
	// fd00::/126 has ::1 (gateway), ::2, ::3 only: exhausted.
	if _, err := alloc(t, st, "c"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("third in a /126 = %v, want ErrConflict (no free address)", err)
	}
	// A failed transaction leaked no IPv4 lease: release b, and c fits.
	if err := st.Update(func(tx *store.Tx) error { return Release(tx, "n", b) }); err != nil {
		t.Fatal(err)
	}
	c, err := alloc(t, st, "c")
	if err != nil || c[0] != netip.MustParseAddr("10.0.0.3") {
		t.Fatalf("after release = %v, %v; want 10.0.0.3", c, err)
	}
}

func TestAllocateRequested(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tc := range []struct {
		req   string
		field bool
	}{
		{"10.0.0.0", true},  // subnet address
		{"10.0.0.1", true},  // gateway
		{"10.0.0.7", true},  // broadcast
		{"10.0.1.2", true},  // outside
		{"10.0.0.6", false}, // fine
	} {
		_, err := alloc(t, st, "x", netip.MustParseAddr(tc.req))
		var fe *model.FieldError
		if got := errors.As(err, &fe) && fe.Field == "ips"; got != tc.field {
			t.Errorf("request %s: err %v, want field error %v", tc.req, err, tc.field)
		}
	}
	if _, err := alloc(t, st, "y", netip.MustParseAddr("10.0.0.6")); !errors.Is(err, model.ErrConflict) {
		t.Errorf("second request for 10.0.0.6 = %v, want ErrConflict", err)
	}
}
