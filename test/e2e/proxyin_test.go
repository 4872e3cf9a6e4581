package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestProxyRedirectIn: `xlane proxy redirect --direction in`.
//
//	netns "pc" (client)                 netns "pa" (app + proxy)
//	10.77.0.2, fd00:77::2  --veth-->    10.77.0.1, fd00:77::1
//	                                    app: HTTP on :8080 (both families)
//	                                    proxy: 127.0.0.1 / ::1 :15006, in cgroup cg
//
// Connections to 8080, from pc and over loopback in pa, go to the proxy
// (sk_lookup); the proxy reads SO_ORIGINAL_DST and fetches from the app on
// 8080 itself without coming back to itself (exempt by cgroup, then by
// SO_MARK). Request and answer bodies are SHA-256 checked, IPv4 and IPv6.
// The redirect survives kill -9 of xlaned, goes with rm and with
// --uninstall. Bad input first, on the same daemon (a daemon's start is
// most of the test's time).
func TestProxyRedirectIn(t *testing.T) {
	n := newNode(t)
	proxyInBadInput(t, n)
	cg := newCgroup(t, "")
	pcg := newCgroup(t, cg)
	pa, pc := newNetns(t, "pa"), newNetns(t, "pc")
	vethBetween(t, pa, pc)
	const port, to = 8080, 15006
	srv := helper(t, cg, pa, "httpsrv", httpSrvArg{Port: port})
	startReady(t, srv)
	remote := []string{"10.77.0.1:8080", "[fd00:77::1]:8080"}
	local := []string{"127.0.0.1:8080", "[::1]:8080"}
	fetch := func(what string, netns string, targets []string, direct bool) {
		t.Helper()
		c := helper(t, cg, netns, "httpget", httpGetArg{Targets: targets, Up: 1 << 20, Down: 3000000, Direct: direct})
		if o, err := c.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", what, err, o)
		}
	}
	// Before any redirect, the app answers directly.
	fetch("before the redirect", pc, remote, true)

	redirect := []string{"proxy", "redirect", "--direction", "in", "--netns", nsPath(pa), "--port", strconv.Itoa(port),
		"--to", strconv.Itoa(to), "--cgroup", cg}
	for i, mode := range []struct {
		exempt  []string
		proxyCg string
		mark    uint32
	}{
		{[]string{"--exempt", "cgroup", "--exempt-cgroup", pcg}, pcg, 0},
		{[]string{"--exempt", "mark", "--mark", "0x539"}, cg, 0x539},
	} {
		proxy := helper(t, mode.proxyCg, pa, "proxy", proxyArg{Port: to, Mark: mode.mark, PlainTCP: true})
		perr := startReady(t, proxy)
		var out api.ProxyRedirect
		n.mustXlane(&out, append(redirect, mode.exempt...)...)
		if out.Direction != "in" || out.Netns != nsPath(pa) || out.Warning != "" {
			t.Errorf("redirect: %+v", out)
		}
		before := proxyCounters(n)
		fetch("from another netns", pc, remote, false)
		fetch("over loopback", pa, local, false)
		after := proxyCounters(n)
		for _, c := range []string{"in_redirected", "in_exempted", "origdst_found"} {
			if got := after[c] - before[c]; got < 4 {
				t.Errorf("exempt %v: %s went up by %d, want at least 4 (one per request): %v", mode.exempt, c, got, after)
			}
		}
		if after["in_no_listener"] != before["in_no_listener"] {
			t.Errorf("exempt %v: in_no_listener went up by %d with the proxy up", mode.exempt, after["in_no_listener"]-before["in_no_listener"])
		}
		var l api.ProxyList
		n.mustXlane(&l, "proxy", "ls")
		if len(l.Redirects) != 1 || l.Redirects[0].Direction != "in" || l.Redirects[0].Port != port {
			t.Errorf("proxy ls: %+v", l)
		}
		if o, _, _ := n.xlane("proxy", "ls"); !strings.Contains(o, "DIRECTION") || !strings.Contains(o, " in ") {
			t.Errorf("proxy ls does not show the direction:\n%s", o)
		}
		if i == 0 {
			// kill -9 of xlaned: the pinned programs carry on; the next
			// daemon adopts them.
			n.stop(syscall.SIGKILL)
			fetch("with xlaned killed", pc, remote[:1], false)
			n.start()
			fetch("after xlaned restarted", pc, remote[1:], false)
		}
		proxy.Process.Kill()
		proxy.Wait()
		if t.Failed() {
			t.Logf("proxy stderr:\n%s", perr)
		}
		// The proxy is down: connections are refused, not handed to the
		// app behind its back (as with iptables REDIRECT).
		c := helper(t, cg, pc, "httpget", httpGetArg{Targets: remote[:1], Up: 1, Down: 1})
		if o, err := c.CombinedOutput(); err == nil || !strings.Contains(string(o), "refused") {
			t.Errorf("with the proxy down: %v\n%s", err, o)
		}
		n.mustXlane(nil, "proxy", "rm", strconv.Itoa(port))
		if pins := proxyInPins(t, n); len(pins) != 0 {
			t.Errorf("after rm: pins %v", pins)
		}
		fetch("after rm", pc, remote, true)
	}
	if o, _ := exec.Command("bpftool", "cgroup", "show", cg).CombinedOutput(); strings.Contains(string(o), "sock_ops") || strings.Contains(string(o), "getsockopt") {
		t.Errorf("programs left on %s after rm:\n%s", cg, o)
	}

	// A container on an xlane network reaching an app on the node: the
	// redirect in xlaned's own namespace (no --netns), the client behind
	// the datapath.
	n.mustXlane(nil, "network", "create", "pin", "--subnet", "10.78.0.0/24", "--subnet", "fd00:78::/64")
	ctr := newNetns(t, "ctr")
	n.mustXlane(nil, "endpoint", "add", "pin", "--netns", ctr)
	nodeSrv := helper(t, cg, n.netns, "httpsrv", httpSrvArg{Port: port})
	startReady(t, nodeSrv)
	nodeProxy := helper(t, cg, n.netns, "proxy", proxyArg{Port: to, Mark: 0x539, PlainTCP: true})
	startReady(t, nodeProxy)
	var out api.ProxyRedirect
	n.mustXlane(&out, "proxy", "redirect", "--direction", "in", "--port", strconv.Itoa(port), "--to", strconv.Itoa(to),
		"--cgroup", cg, "--exempt", "mark", "--mark", "0x539")
	if out.Netns != "" {
		t.Errorf("redirect in xlaned's namespace: %+v", out)
	}
	gws := []string{"10.78.0.1:8080", "[fd00:78::1]:8080"}
	before := proxyCounters(n)
	fetch("from a container on an xlane network", ctr, gws, false)
	if got := proxyCounters(n)["in_redirected"] - before["in_redirected"]; got < 2 {
		t.Errorf("in_redirected went up by %d for the container's requests", got)
	}
	n.mustXlane(nil, "proxy", "rm", strconv.Itoa(port))
	fetch("from a container after rm", ctr, gws, true)
	for _, c := range []*exec.Cmd{nodeSrv, nodeProxy} {
		c.Process.Kill()
		c.Wait()
	}

	// --uninstall detaches sk_lookup with every pin.
	proxy := helper(t, cg, pa, "proxy", proxyArg{Port: to, Mark: 0x539, PlainTCP: true})
	startReady(t, proxy)
	n.mustXlane(nil, append(redirect, "--exempt", "mark", "--mark", "0x539")...)
	fetch("before --uninstall", pc, remote[:1], false)
	n.stop(syscall.SIGTERM)
	args := []string{filepath.Join(binDir, "xlaned"), "--uninstall",
		"--state", filepath.Join(n.dir, "state.db"), "--socket", n.socket, "--pin-dir", n.pinDir}
	if o, err := inNS(n.netns, args...).CombinedOutput(); err != nil {
		t.Fatalf("xlaned --uninstall: %v\n%s", err, o)
	}
	fetch("after --uninstall", pc, remote, true)
	proxy.Process.Kill()
	proxy.Wait()
}

// proxyInBadInput: refused inbound redirects name the bad field and
// leave nothing attached.
func proxyInBadInput(t *testing.T, n *node) {
	cg := newCgroup(t, "")
	other := newCgroup(t, "")
	pa := newNetns(t, "pa")
	runIn(t, pa, "ip", "link", "set", "lo", "up")
	base := func(to int, extra ...string) []string {
		return append([]string{"proxy", "redirect", "--direction", "in", "--netns", nsPath(pa), "--port", "8080",
			"--to", strconv.Itoa(to), "--cgroup", cg, "--exempt", "mark", "--mark", "7"}, extra...)
	}
	try := func(want string, args ...string) {
		t.Helper()
		if _, stderr, err := n.xlane(args...); err == nil || !strings.Contains(stderr, want) {
			t.Errorf("%v: err %v, stderr %q, want one naming %q", args, err, stderr, want)
		}
	}
	// Nobody listens on the proxy port.
	try("to", base(15006)...)
	try("nothing listens", base(15006)...)
	try("netns", "proxy", "redirect", "--direction", "in", "--netns", "/var/run/netns/xle-missing-"+suffix(), "--port", "8080", "--to", "15006", "--exempt", "uid")
	try("cgroup", "proxy", "redirect", "--direction", "in", "--netns", nsPath(pa), "--port", "8080", "--to", "15006", "--cgroup", "xle-missing-"+suffix(), "--exempt", "uid")
	try("direction", "proxy", "redirect", "--direction", "sideways", "--port", "8080", "--to", "15006")
	try("netns", "proxy", "redirect", "--direction", "out", "--netns", nsPath(pa), "--port", "8080", "--to", "15006")
	// --network: refused in both directions, saying why and what instead.
	try(`network "pin": not supported with direction "in"`, append(base(15006), "--network", "pin")...)
	try("--netns", append(base(15006), "--network", "pin")...)
	try(`network "pin": not supported with direction "out"`, "proxy", "redirect", "--network", "pin", "--port", "8080", "--to", "15006", "--cgroup", cg)

	// A proxy listening with MPTCP (Go's default), and one in another
	// cgroup.
	mp := helper(t, cg, pa, "proxy", proxyArg{Port: 15007})
	startReady(t, mp)
	try("MPTCP", base(15007)...)
	elsewhere := helper(t, other, pa, "proxy", proxyArg{Port: 15008, PlainTCP: true})
	startReady(t, elsewhere)
	try("cgroup", base(15008)...)

	// A good one, then the same port again.
	good := helper(t, cg, pa, "proxy", proxyArg{Port: 15009, PlainTCP: true})
	startReady(t, good)
	n.mustXlane(nil, base(15009)...)
	try("already redirected", base(15009)...)
	n.mustXlane(nil, "proxy", "rm", "8080")
	for _, c := range []*exec.Cmd{mp, elsewhere, good} {
		c.Process.Kill()
		c.Wait()
	}

	var l api.ProxyList
	n.mustXlane(&l, "proxy", "ls")
	if len(l.Redirects) != 0 {
		t.Errorf("after refused redirects and rm: %+v", l)
	}
	if pins := proxyInPins(t, n); len(pins) != 0 {
		t.Errorf("sk_lookup pins left: %v", pins)
	}
	if o, _ := exec.Command("bpftool", "cgroup", "show", cg).CombinedOutput(); strings.Contains(string(o), "sock_ops") {
		t.Errorf("programs left on %s:\n%s", cg, o)
	}
}

// vethBetween joins two namespaces: a gets 10.77.0.1/24 and fd00:77::1/64,
// b .2 and ::2.
func vethBetween(t *testing.T, a, b string) {
	t.Helper()
	s := suffix()
	va, vb := "xpa"+s, "xpb"+s
	run(t, "ip", "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b)
	for _, c := range []struct{ ns, dev, v4, v6 string }{{a, va, "10.77.0.1/24", "fd00:77::1/64"}, {b, vb, "10.77.0.2/24", "fd00:77::2/64"}} {
		runIn(t, c.ns, "ip", "link", "set", "lo", "up")
		runIn(t, c.ns, "ip", "addr", "add", c.v4, "dev", c.dev)
		runIn(t, c.ns, "ip", "addr", "add", c.v6, "dev", c.dev, "nodad")
		runIn(t, c.ns, "ip", "link", "set", c.dev, "up")
	}
}

// startReady starts a helper and waits for its "ready" line; it returns
// its stderr.
func startReady(t *testing.T, c *exec.Cmd) *bytes.Buffer {
	t.Helper()
	out, _ := c.StdoutPipe()
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.ProcessState == nil {
			c.Process.Kill()
			c.Wait()
		}
	})
	ready := make([]byte, 6)
	done := make(chan error, 1)
	go func() { _, err := out.Read(ready); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("helper not ready\n%s", errb.String())
	}
	return &errb
}

func proxyCounters(n *node) map[string]uint64 {
	var l api.ProxyList
	n.mustXlane(&l, "proxy", "ls")
	return l.Counters
}

// proxyInPins are the node's pinned sk_lookup links.
func proxyInPins(t *testing.T, n *node) []string {
	ents, err := os.ReadDir(filepath.Join(n.pinDir, "sock"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "proxyin_") {
			out = append(out, e.Name())
		}
	}
	return out
}
