package accelproxy

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// xlane's own cgroup (requests without --cgroup) is created only when a
// request is applied, never by one that fails validation, and removed when
// the last record naming it goes.
func TestOwnCgroupLifeCycle(t *testing.T) {
	testCgroup(t) // root and a cgroup2 mount, or a skip that says why not
	old := ownCgroupName
	ownCgroupName = fmt.Sprintf("xlane-owntest-%d", os.Getpid())
	t.Cleanup(func() { ownCgroupName = old })
	own, err := ownCgroup()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(own) })
	exists := func() bool { _, err := os.Stat(own); return err == nil }
	ap, _ := fakeControl(t)
	fakeSelfTest(t)

	var fe *model.FieldError
	if _, err := ap.EnableAccel(api.AccelEnable{Nets: []string{"10.0.0.0/33"}}); !errors.As(err, &fe) {
		t.Fatalf("enable with a bad prefix: %v, want a field error", err)
	}
	if _, err := ap.AddProxyRedirect(api.ProxyRedirect{Port: 80, To: 15001, Exempt: "mark"}); !errors.As(err, &fe) {
		t.Fatalf("redirect without its mark: %v, want a field error", err)
	}
	if exists() {
		t.Fatalf("refused requests created %s", own)
	}

	if _, err := ap.EnableAccel(api.AccelEnable{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ap.AddProxyRedirect(api.ProxyRedirect{Port: 80, To: 15001, Exempt: "uid", UID: 1337}); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatalf("%s missing with acceleration and a redirect on it", own)
	}
	if _, err := ap.DisableAccel(); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatalf("%s removed while a redirect still uses it", own)
	}
	if err := ap.DeleteProxyRedirect(80, ""); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatalf("%s left when nothing uses it", own)
	}
	// A process in it keeps it.
	if _, err := ap.EnableAccel(api.AccelEnable{}); err != nil {
		t.Fatal(err)
	}
	child := own + "/held"
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(child) })
	if _, err := ap.DisableAccel(); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatalf("%s removed with a cgroup in it", own)
	}
	os.Remove(child)
	removeOwnCgroup(own, ap.c.Log()) // what --uninstall does
	if exists() {
		t.Fatalf("%s left by uninstall's removal", own)
	}
}
