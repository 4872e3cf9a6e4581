package e2e

import (
	"strconv"
	"testing"
	"time"
)

// TestProxyInAccel: with acceleration on for the cgroup of an inbound
// redirect's app and proxy, the proxy<->app leg goes socket to socket.
//
//	netns "pc": client, cgroup "other"  --veth-->  netns "pa": app :8080 (cgroup cg),
//	                                               proxy :15006 (cgroup pcg, below cg)
//
// With the client outside the accelerated cgroup only the leg between
// the proxy and the app can be redirected: bytes_redirected must grow by
// at least every request and answer body the proxy carried to and from
// the app, and by no more than that plus headers. With the client in it,
// both legs are: at least every body twice. With acceleration off, not
// at all. The same requests
// (2 MiB up, 3 MiB down, IPv4 and IPv6, from another namespace and over
// loopback in the app's) are SHA-256 checked both ways by the client and
// the app, with acceleration never enabled, on (client outside, then
// inside the accelerated cgroup), and disabled.
func TestProxyInAccel(t *testing.T) {
	n := newNode(t, accelTestNode)
	cg := newCgroup(t, "")
	pcg := newCgroup(t, cg)
	other := newCgroup(t, "")
	pa, pc := newNetns(t, "pa"), newNetns(t, "pc")
	vethBetween(t, pa, pc)
	const port, to, up, down = 8080, 15006, 2 << 20, 3 << 20
	startReady(t, helper(t, cg, pa, "httpsrv", httpSrvArg{Port: port}))
	perr := startReady(t, helper(t, pcg, pa, "proxy", proxyArg{Port: to, PlainTCP: true}))
	n.mustXlane(nil, "proxy", "redirect", "--direction", "in", "--netns", nsPath(pa), "--port", strconv.Itoa(port),
		"--to", strconv.Itoa(to), "--cgroup", cg, "--exempt", "cgroup", "--exempt-cgroup", pcg)
	remote := []string{"10.77.0.1:8080", "[fd00:77::1]:8080"}
	local := []string{"127.0.0.1:8080", "[::1]:8080"}
	const requests = 4
	fetch := func(what string, clientCg string) {
		t.Helper()
		start := time.Now()
		for _, f := range []struct {
			netns   string
			targets []string
		}{{pc, remote}, {pa, local}} {
			c := helper(t, clientCg, f.netns, "httpget", httpGetArg{Targets: f.targets, Up: up, Down: down})
			if o, err := c.CombinedOutput(); err != nil {
				t.Errorf("%s, %v: %v\n%s", what, f.targets, err, o)
			}
		}
		t.Logf("%s: %d requests in %v", what, requests, time.Since(start).Round(time.Millisecond))
	}
	redirected := func() uint64 { return proxyCounters(n)["in_redirected"] }

	r0 := redirected()
	fetch("acceleration never enabled", other)
	if got := redirected() - r0; got < requests {
		t.Errorf("in_redirected went up by %d, want %d: the requests did not go through the proxy", got, requests)
	}

	enableAccel(t, n, cg, "--net", "10.77.0.0/24", "--net", "fd00:77::/64", "--net", "127.0.0.0/8", "--net", "::1/128")
	before := accelStatus(n).Counters
	r0 = redirected()
	fetch("acceleration on", other)
	after := accelStatus(n).Counters
	d := func(k string) uint64 { return after[k] - before[k] }
	t.Logf("acceleration on: sock_added %d, msg_redirected %d, bytes_redirected %d, fallback_no_peer %d, fallback_backlog %d, fallback_small_stream %d, fallback_bytes %d",
		d("sock_added"), d("msg_redirected"), d("bytes_redirected"), d("fallback_no_peer"), d("fallback_backlog"), d("fallback_small_stream"), d("fallback_bytes"))
	if got := redirected() - r0; got < requests {
		t.Errorf("in_redirected went up by %d, want %d", got, requests)
	}
	// Each request: the proxy's upstream socket and the app's accepted
	// one enter the map (and the proxy's accepted socket, whose client
	// is not accelerated).
	if d("sock_added") < 2*requests {
		t.Errorf("sock_added went up by %d, want at least %d (the proxy's upstream and the app's socket per request)", d("sock_added"), 2*requests)
	}
	if d("bytes_redirected") < requests*(up+down) {
		t.Errorf("the fast path carried %d bytes, want at least %d (every body between the proxy and the app)", d("bytes_redirected"), requests*(up+down))
	}
	// The client leg is not accelerated: its client is outside the cgroup.
	// The proxy's answers to it fall back for want of a peer, so the fast
	// path carried no more than the proxy<->app leg (plus headers).
	if d("fallback_no_peer") < requests {
		t.Errorf("fallback_no_peer went up by %d, want at least %d (the proxy's accepted sockets, whose clients are not accelerated)", d("fallback_no_peer"), requests)
	}
	if d("bytes_redirected") > requests*(up+down+64<<10) {
		t.Errorf("the fast path carried %d bytes, more than the proxy<->app leg can (%d): the unaccelerated client leg was redirected", d("bytes_redirected"), requests*(up+down+64<<10))
	}
	if d("fallback_backlog") != 0 || d("fallback_mem_pressure") != 0 {
		t.Errorf("fallback_backlog %d, fallback_mem_pressure %d: the app and the proxy read as they go", d("fallback_backlog"), d("fallback_mem_pressure"))
	}
	// The proxy relays what it reads; an odd short read is no stream of
	// small writes (docs/accel.md).
	if d("fallback_small_stream") != 0 {
		t.Errorf("fallback_small_stream went up by %d: the proxy's relay was taken for a stream of small writes", d("fallback_small_stream"))
	}

	// A client in the accelerated cgroup: the client<->proxy leg is
	// accelerated too (the proxy's accepted socket keeps the original
	// destination as its local address, the client's remote end), so
	// the fast path carries every body twice and nothing lacks a peer.
	before = accelStatus(n).Counters
	fetch("acceleration on, client accelerated too", cg)
	after = accelStatus(n).Counters
	t.Logf("client accelerated too: sock_added %d, bytes_redirected %d, fallback_no_peer %d, fallback_small_stream %d, fallback_bytes %d",
		d("sock_added"), d("bytes_redirected"), d("fallback_no_peer"), d("fallback_small_stream"), d("fallback_bytes"))
	if d("bytes_redirected") < 2*requests*(up+down) {
		t.Errorf("client accelerated too: the fast path carried %d bytes, want at least %d (every body on both legs)", d("bytes_redirected"), 2*requests*(up+down))
	}
	if d("sock_added") < 4*requests || d("fallback_no_peer") != 0 {
		t.Errorf("client accelerated too: sock_added went up by %d (want at least %d), fallback_no_peer by %d (want 0)", d("sock_added"), 4*requests, d("fallback_no_peer"))
	}

	n.mustXlane(nil, "accel", "disable")
	before = accelStatus(n).Counters
	fetch("acceleration disabled", other)
	after = accelStatus(n).Counters
	if d("bytes_redirected") != 0 || d("sock_added") != 0 {
		t.Errorf("with acceleration off: bytes_redirected went up by %d, sock_added by %d", d("bytes_redirected"), d("sock_added"))
	}
	if t.Failed() {
		t.Logf("proxy stderr:\n%s", perr)
	}
	n.mustXlane(nil, "proxy", "rm", strconv.Itoa(port))
}
