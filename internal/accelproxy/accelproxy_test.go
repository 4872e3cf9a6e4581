package accelproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/datapath/datapathtest"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// testCgroup is a throwaway cgroup2 directory (root only).
func testCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a cgroup2 directory)")
	}
	root, err := accel.Cgroup2Root()
	if err != nil && os.Getenv("XLANE_VM_KERNEL") != "" {
		// The kernel matrix's guests mount no cgroup2: socket acceleration
		// is tested there by the self-test's own cgroup, not here.
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.MkdirTemp(root, "xlane-daemon-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// fakeSelfTest makes the daemon's self-test report the given failures.
func fakeSelfTest(t *testing.T, failing ...string) {
	old := SelfTest
	SelfTest = func(context.Context, accel.Options) *accel.Report {
		r := &accel.Report{Kernel: "test"}
		for _, c := range accel.CaseNames() {
			ok := !strings.Contains(strings.Join(failing, ","), c)
			r.Cases = append(r.Cases, accel.CaseResult{Name: c, OK: ok, Error: map[bool]string{false: "broken"}[ok]})
		}
		return r
	}
	t.Cleanup(func() { SelfTest = old })
}

// TestAccelGate: a failing self-test case keeps acceleration off and is
// named, saying acceleration is unavailable on this kernel; ignoring it
// (tests only: accel.IgnoreCasesEnv), or a kernel that passes, turns it on; a failed
// attach leaves it off.
func TestAccelGate(t *testing.T) {
	cg := testCgroup(t)
	ap, fake := fakeControl(t)
	fakeSelfTest(t, "splice")
	_, err := ap.EnableAccel(api.AccelEnable{Cgroup: cg})
	if !errors.Is(err, model.ErrConflict) || !strings.Contains(err.Error(), "splice") {
		t.Fatalf("enable with splice failing: %v", err)
	}
	if st, _ := fake.AccelStatus(); st.On {
		t.Fatal("acceleration on after a failed self-test")
	}
	st, _ := ap.AccelStatus()
	if st.State != "failed" || !strings.Contains(st.Reason, "splice") {
		t.Fatalf("status after a failed self-test: %+v", st)
	}
	if !strings.Contains(err.Error(), "unavailable on this kernel") || !strings.Contains(st.Reason, "unavailable on this kernel") {
		t.Fatalf("error %q and status %q do not say acceleration is unavailable on this kernel", err, st.Reason)
	}
	// Only xlane's own tests may ignore a case (no API field can).
	t.Setenv(accel.IgnoreCasesEnv, "splice")
	if st, err := ap.EnableAccel(api.AccelEnable{Cgroup: cg}); err != nil || st.State != "on" {
		t.Fatalf("enable ignoring splice in a test: %+v %v", st, err)
	}
	if st, err := ap.DisableAccel(); err != nil || st.State != "off" {
		t.Fatalf("disable: %+v %v", st, err)
	}
	fakeSelfTest(t)
	fake.Fail = datapathtest.FailOp("enable-accel", func(any) bool { return true })
	if _, err := ap.EnableAccel(api.AccelEnable{Cgroup: cg}); !errors.Is(err, datapathtest.ErrFake) {
		t.Fatalf("enable with a failing attach: %v", err)
	}
	if st, _ := fake.AccelStatus(); st.On {
		t.Fatal("acceleration on after a failed attach")
	}
	fake.Fail = nil
	for _, bad := range []api.AccelEnable{
		{Cgroup: filepath.Join(cg, "missing")},
		{Cgroup: cg, Nets: []string{"10.0.0.0/33"}},
		{Cgroup: cg, Ports: []uint16{0}},
	} {
		var fe *model.FieldError
		if _, err := ap.EnableAccel(bad); !errors.As(err, &fe) {
			t.Errorf("enable %+v: %v, want a field error", bad, err)
		}
	}
}

// TestProxyRedirectChecks: refused input names its field or conflict,
// and a failed rule write leaves neither rule, attachment nor record.
func TestProxyRedirectChecks(t *testing.T) {
	cg := testCgroup(t)
	ap, fake := fakeControl(t)
	ok := api.ProxyRedirect{Port: 80, To: 15001, Cgroup: cg, Exempt: "uid", UID: 1337}
	r, err := ap.AddProxyRedirect(ok)
	if err != nil {
		t.Fatal(err)
	}
	if r.Warning == "" {
		t.Error("no warning for a proxy port nobody listens on")
	}
	for _, c := range []struct {
		req  api.ProxyRedirect
		want string
	}{
		{ok, "already redirected"},
		{api.ProxyRedirect{Port: 81, To: 81, Cgroup: cg, Exempt: "uid"}, "to"},
		{api.ProxyRedirect{Port: 15001, To: 15002, Cgroup: cg, Exempt: "uid"}, "port"},
		{api.ProxyRedirect{Port: 82, To: 80, Cgroup: cg, Exempt: "uid"}, "to"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "mark"}, "mark"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "pid"}, "exempt"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "uid", Direction: "sideways"}, "direction"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "uid", Netns: "/proc/self/ns/net"}, "netns"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "uid", Direction: "in", Netns: "/nonexistent"}, "netns"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "uid", Direction: "in"}, "nothing listens"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: filepath.Join(cg, "missing"), Exempt: "uid"}, "cgroup"},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "uid", Direction: "in", Network: "pin"}, `network "pin": not supported with direction "in": sk_lookup`},
		{api.ProxyRedirect{Port: 83, To: 15003, Cgroup: cg, Exempt: "uid", Network: "pin"}, `network "pin": not supported with direction "out"`},
	} {
		if _, err := ap.AddProxyRedirect(c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("redirect %+v: %v, want an error naming %q", c.req, err, c.want)
		}
	}
	fake.Fail = datapathtest.FailOp("put-proxy-rule", func(any) bool { return true })
	if _, err := ap.AddProxyRedirect(api.ProxyRedirect{Port: 90, To: 15009, Cgroup: cg, Exempt: "uid"}); err == nil {
		t.Fatal("redirect with a failing rule write succeeded")
	}
	fake.Fail = nil
	l, _ := ap.ProxyRedirects()
	rules, _ := fake.ProxyRules()
	if len(l.Redirects) != 1 || len(rules) != 1 {
		t.Fatalf("after a failed redirect: store %+v, datapath %+v", l.Redirects, rules)
	}
	if err := ap.DeleteProxyRedirect(80, ""); err != nil {
		t.Fatal(err)
	}
	if err := ap.DeleteProxyRedirect(80, ""); err != nil {
		t.Fatalf("deleting a missing redirect: %v", err)
	}
	if rules, _ := fake.ProxyRules(); len(rules) != 0 {
		t.Fatalf("rules left: %+v", rules)
	}
}

// TestProxyRedirectInRollback: an inbound redirect whose apply fails at
// any step (before or after the datapath wrote) leaves no rule, listener,
// sk_lookup attachment or record; a good one goes with rm.
func TestProxyRedirectInRollback(t *testing.T) {
	cg := testCgroup(t)
	// The proxy is this test process, listening in its namespace (the
	// daemon's own: no Netns) from inside cg.
	root, _ := accel.Cgroup2Root()
	self := []byte(strconv.Itoa(os.Getpid()))
	orig := accel.ProcCgroup(os.Getpid())
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), self, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		back := filepath.Join(root, orig)
		if err := os.WriteFile(filepath.Join(back, "cgroup.procs"), self, 0); err != nil {
			t.Errorf("move back to %s: %v", back, err)
		}
	})
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	to := uint16(l.Addr().(*net.TCPAddr).Port)
	ap, fake := fakeControl(t)
	req := api.ProxyRedirect{Port: 8080, To: to, Cgroup: cg, Exempt: "uid", UID: 1337, Direction: "in"}
	empty := func(when string) {
		t.Helper()
		rules, _ := fake.ProxyInRules()
		nss, _ := fake.ProxyInNetns()
		ls, _ := ap.ProxyRedirects()
		if len(rules) != 0 || len(nss) != 0 || len(ls.Redirects) != 0 || fake.ProxyListener(rulesNetns(t), to, 4) {
			t.Errorf("%s: rules %v, netns %v, records %v", when, rules, nss, ls.Redirects)
		}
	}
	for _, after := range []bool{false, true} {
		for _, op := range []string{"attach-proxy", "put-proxy-in-rule", "put-proxy-listener", "attach-proxy-in"} {
			fake.Fail, fake.FailAfterWrite = datapathtest.FailOp(op, func(any) bool { return true }), after
			if _, err := ap.AddProxyRedirect(req); err == nil {
				t.Errorf("redirect with %s failing succeeded", op)
			}
			fake.Fail, fake.FailAfterWrite = nil, false
			empty(fmt.Sprintf("after %s failed (written: %v)", op, after))
		}
	}
	out, err := ap.AddProxyRedirect(req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Direction != "in" || out.Netns != "" {
		t.Errorf("redirect: %+v", out)
	}
	if rules, _ := fake.ProxyInRules(); len(rules) != 1 || !fake.ProxyListener(rules[0].Netns, to, 4) {
		t.Errorf("after a good redirect: rules %+v", rules)
	}
	if err := ap.DeleteProxyRedirect(8080, ""); err != nil {
		t.Fatal(err)
	}
	empty("after rm")
}

// rulesNetns is the cookie of this process's network namespace.
func rulesNetns(t *testing.T) uint64 {
	c, err := datapath.NetnsCookie("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProxyKeys: two inbound redirects of a port in two namespaces do not
// clash (the same namespace, an outbound one of the port, and loops within
// a namespace do); rm by port alone is refused naming both keys, by key
// picks one.
func TestProxyKeys(t *testing.T) {
	a := store.ProxyRecord{Port: 80, To: 15006, Direction: "in", Netns: "/run/netns/a", NetnsCookie: 1}
	b := store.ProxyRecord{Port: 80, To: 15006, Direction: "in", Netns: "/run/netns/b", NetnsCookie: 2}
	out := store.ProxyRecord{Port: 80, To: 15001, Cgroup: "/sys/fs/cgroup/x"}
	if err := proxyClash(b, []store.ProxyRecord{a}); err != nil {
		t.Fatalf("second namespace refused: %v", err)
	}
	for _, c := range []struct {
		rec  store.ProxyRecord
		want string
	}{
		{store.ProxyRecord{Port: 80, To: 15007, Direction: "in", Netns: "/proc/1/ns/net", NetnsCookie: 1}, "already redirected in network namespace /run/netns/a (to 15006, key in:/run/netns/a:80)"},
		{out, "already redirected in network namespace /run/netns/a"},
		{store.ProxyRecord{Port: 15006, To: 15010, Direction: "in", NetnsCookie: 1}, "port"},
	} {
		if err := proxyClash(c.rec, []store.ProxyRecord{a}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.rec, err, c.want)
		}
	}
	have := []store.ProxyRecord{a, b}
	if _, _, err := proxyPick(have, 80, ""); err == nil || !strings.Contains(err.Error(), "in:/run/netns/a:80, in:/run/netns/b:80") {
		t.Errorf("rm 80 with two: %v, want the keys named", err)
	}
	if r, ok, err := proxyPick(have, 80, "in:/run/netns/b:80"); err != nil || !ok || r.Netns != "/run/netns/b" {
		t.Errorf("rm by key: %+v %v %v", r, ok, err)
	}
	if _, ok, err := proxyPick(have, 81, ""); err != nil || ok {
		t.Errorf("rm of a port nobody redirects: %v %v", ok, err)
	}
	for _, k := range []string{"in:/run/netns/a:81", "sideways:x:80", "80"} {
		if _, _, err := proxyPick(have, 80, k); err == nil || !strings.Contains(err.Error(), "key") {
			t.Errorf("key %q: %v, want an error naming key", k, err)
		}
	}
}
