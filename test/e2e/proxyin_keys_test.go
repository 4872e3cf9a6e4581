package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestProxyInTwoSidecars: two endpoints (network namespaces pa and pb),
// each with its app on 8080 and its sidecar proxy on 15006, each get their
// own `proxy redirect --direction in --port 80`-style redirect of 8080
// (issue 36 §4: the second was refused, port 8080 being "already
// redirected"). Traffic in each namespace goes through its own sidecar
// (SHA-256 checked both ways, X-Xlane-Proxy seen by the app), `proxy ls`
// shows both keys, `proxy rm 8080` is refused naming both, `proxy rm KEY`
// removes one while the other keeps redirecting.
func TestProxyInTwoSidecars(t *testing.T) {
	n := newNode(t)
	cg := newCgroup(t, "")
	pa, pb, pc := newNetns(t, "pa"), newNetns(t, "pb"), newNetns(t, "pc")
	vethBetween(t, pa, pc)
	runIn(t, pb, "ip", "link", "set", "lo", "up")
	const port, to = 8080, 15006
	local := []string{"127.0.0.1:8080", "[::1]:8080"}
	fetch := func(what, netns string, targets []string, direct bool) {
		t.Helper()
		c := helper(t, cg, netns, "httpget", httpGetArg{Targets: targets, Up: 64 << 10, Down: 1 << 20, Direct: direct})
		if o, err := c.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", what, err, o)
		}
	}
	keys := map[string]string{}
	for _, ns := range []string{pa, pb} {
		startReady(t, helper(t, cg, ns, "httpsrv", httpSrvArg{Port: port}))
		startReady(t, helper(t, cg, ns, "proxy", proxyArg{Port: to, Mark: 0x539, PlainTCP: true}))
		var out api.ProxyRedirect
		n.mustXlane(&out, "proxy", "redirect", "--direction", "in", "--netns", nsPath(ns), "--port", strconv.Itoa(port),
			"--to", strconv.Itoa(to), "--cgroup", cg, "--exempt", "mark", "--mark", "0x539")
		want := "in:" + nsPath(ns) + ":" + strconv.Itoa(port)
		if out.Key != want {
			t.Errorf("redirect in %s: key %q, want %q", ns, out.Key, want)
		}
		keys[ns] = out.Key
	}
	if t.Failed() {
		t.FailNow()
	}
	before := proxyCounters(n)
	fetch("pa over loopback", pa, local, false)
	fetch("pa from another namespace", pc, []string{"10.77.0.1:8080", "[fd00:77::1]:8080"}, false)
	fetch("pb over loopback", pb, local, false)
	if got := proxyCounters(n)["in_redirected"] - before["in_redirected"]; got < 6 {
		t.Errorf("in_redirected went up by %d, want 6 (one per request)", got)
	}
	o, _, err := n.xlane("proxy", "ls")
	if err != nil || !strings.Contains(o, "KEY") || !strings.Contains(o, keys[pa]) || !strings.Contains(o, keys[pb]) {
		t.Errorf("proxy ls does not show both keys (%v):\n%s", err, o)
	}
	if _, stderr, err := n.xlane("proxy", "rm", strconv.Itoa(port)); err == nil || !strings.Contains(stderr, keys[pa]) || !strings.Contains(stderr, keys[pb]) {
		t.Errorf("proxy rm %d with two redirects of it: %v, stderr %q, want both keys named", port, err, stderr)
	}
	n.mustXlane(nil, "proxy", "rm", keys[pb])
	fetch("pb after its rm", pb, local, true)
	fetch("pa after pb's rm", pa, local, false)
	var l api.ProxyList
	n.mustXlane(&l, "proxy", "ls")
	if len(l.Redirects) != 1 || l.Redirects[0].Key != keys[pa] {
		t.Errorf("after rm of pb's: %+v", l.Redirects)
	}
	// One left: PORT alone names it.
	n.mustXlane(nil, "proxy", "rm", strconv.Itoa(port))
	fetch("pa after its rm", pa, local, true)
	if pins := proxyInPins(t, n); len(pins) != 0 {
		t.Errorf("after both rm: pins %v", pins)
	}
}
