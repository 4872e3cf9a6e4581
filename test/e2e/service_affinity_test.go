package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// ClientIP session affinity with a timeout, through real TCP: every
// client (a container, a host off the node through the uplink, the node's
// own processes through the cgroup hooks) keeps one backend; a service
// without affinity spreads one client's connections. The state (not just
// a hash of the client) shows when a backend drains and comes back: the
// client moved off it keeps its new backend until the timeout, then the
// client address's Maglev slot (its first backend) again.
//
//	client c1 ─┐                                   ┌─ b1 :8080
//	client c2 ─┼─ 10.96.0.20:80, [fd00:96::20]:80 ─┼─ b2 :8080
//	outside  ──┤    (affinity, timeout 3 s)        └─ b3 :8080
//	node      ─┘
func TestServiceAffinity(t *testing.T) {
	const timeout = 3 * time.Second
	var out string
	n := newNode(t, withOutside(&out, "1500"))
	runIn(t, out, "ip", "route", "add", "10.96.0.0/24", "via", "192.0.2.2")
	runIn(t, out, "ip", "-6", "route", "add", "fd00:96::/64", "via", "2001:db8:83::2")
	n.mustXlane(nil, "network", "create", "svc", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--masquerade=false")
	c1, c2 := newNetns(t, "c"), newNetns(t, "c")
	var c1ep api.EndpointInfo
	n.mustXlane(&c1ep, "endpoint", "add", "svc", "--netns", c1)
	n.mustXlane(nil, "endpoint", "add", "svc", "--netns", c2)
	var b4, b6 []string
	for i := 1; i <= 3; i++ {
		b := newNetns(t, "b")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "svc", "--netns", b)
		name := fmt.Sprintf("b%d", i)
		startNameServer(t, b, name, netip.AddrPortFrom(ep.IPs[0], 8080))
		startNameServer(t, b, name, netip.AddrPortFrom(ep.IPs[1], 8080))
		b4 = append(b4, netip.AddrPortFrom(ep.IPs[0], 8080).String())
		b6 = append(b6, netip.AddrPortFrom(ep.IPs[1], 8080).String())
	}
	create := func(name, vip string, backends []string, extra ...string) {
		args := append([]string{"service", "create", name, "--vip", vip}, extra...)
		for _, b := range backends {
			args = append(args, "--backend", b)
		}
		n.mustXlane(nil, args...)
	}
	secs := fmt.Sprint(int(timeout / time.Second))
	create("aff", "10.96.0.20:80/tcp", b4, "--affinity", "--affinity-timeout", secs)
	create("aff6", "[fd00:96::20]:80/tcp", b6, "--affinity", "--affinity-timeout", secs)
	create("spread", "10.96.0.21:80/tcp", b4)
	create("spread6", "[fd00:96::21]:80/tcp", b6)

	// reached opens conns connections from netns to vip, one after the
	// other, and counts the backends that answered.
	reached := func(from string, vip netip.AddrPort, conns int) map[string]int {
		got := map[string]int{}
		for range conns {
			cl := dialVIP(t, from, vip)
			got[cl.backend]++
			cl.conn.Close()
		}
		return got
	}
	// one is the single backend from's connections reached, or a failure.
	one := func(what, from string, vip netip.AddrPort) string {
		t.Helper()
		got := reached(from, vip, 12)
		if len(got) != 1 {
			t.Fatalf("%s: 12 connections from %s to %s reached %v, want one backend", what, from, vip, got)
		}
		for b := range got {
			return b
		}
		return ""
	}
	setWeight := func(svc string, backends []string, name string, w int) {
		args := []string{"service", "update", svc}
		for i, b := range backends {
			if fmt.Sprintf("b%d", i+1) == name {
				b += fmt.Sprintf("@%d", w)
			}
			args = append(args, "--backend", b)
		}
		n.mustXlane(nil, args...)
	}

	for _, fam := range []struct {
		svc, spread string
		vip, vip2   netip.AddrPort
		backends    []string
	}{
		{"aff", "spread", netip.MustParseAddrPort("10.96.0.20:80"), netip.MustParseAddrPort("10.96.0.21:80"), b4},
		{"aff6", "spread6", netip.MustParseAddrPort("[fd00:96::20]:80"), netip.MustParseAddrPort("[fd00:96::21]:80"), b6},
	} {
		t.Run(fam.svc, func(t *testing.T) {
			for _, from := range []string{c1, c2, out, n.netns} {
				one("affinity", from, fam.vip)
			}
			if got := reached(c1, fam.vip2, 30); len(got) < 2 {
				t.Errorf("30 connections from %s to %s (no affinity) reached %v, want them spread", c1, fam.vip2, got)
			}
			// The state: drain the client's backend, bring it back.
			for _, from := range []string{c1, out, n.netns} {
				first := one("before the drain", from, fam.vip)
				setWeight(fam.svc, fam.backends, first, 0)
				moved := one("with its backend draining", from, fam.vip)
				if moved == first {
					t.Fatalf("from %s: new connections still reach draining %s", from, first)
				}
				setWeight(fam.svc, fam.backends, first, 1)
				if got := one("after the backend came back", from, fam.vip); got != moved {
					t.Errorf("from %s: within the timeout the client went from %s to %s (the state was not kept)", from, moved, got)
				}
				if from == n.netns {
					// The node's first choice hashes the socket, not an
					// address: after the timeout it is anyone's.
					continue
				}
				time.Sleep(timeout + time.Second)
				if got := one("after the timeout", from, fam.vip); got != first {
					t.Errorf("from %s: after the timeout the client reached %s, want its address's slot %s again", from, got, first)
				}
			}
		})
	}

	var md api.MapDump
	n.mustXlane(&md, "bpf", "dump", "affinity", "--limit", "0")
	var clients []string
	for _, e := range md.Entries {
		clients = append(clients, fmt.Sprint(e["client"]))
	}
	for _, want := range []string{c1ep.IPs[0].String(), c1ep.IPs[1].String(), "node"} {
		if !strings.Contains(" "+strings.Join(clients, " ")+" ", " "+want+" ") {
			t.Errorf("xlane bpf dump affinity: clients %v, want %s among them", clients, want)
		}
	}

	// Errors name the field.
	for _, args := range [][]string{
		{"service", "create", "bad", "--vip", "10.96.0.30:80", "--backend", b4[0], "--affinity", "--affinity-timeout", "86401"},
		{"service", "create", "bad", "--vip", "10.96.0.30:80", "--backend", b4[0], "--affinity-timeout", "60"},
		{"service", "update", "aff", "--affinity-timeout", "-1"},
	} {
		if _, stderr, err := n.xlane(args...); err == nil || !strings.Contains(stderr, "affinity_timeout") {
			t.Errorf("xlane %v: err %v, stderr %q: want an error naming affinity_timeout", args, err, stderr)
		}
	}
	// An update of the timeout alone keeps the backends.
	var s struct {
		AffinityTimeout int   `json:"affinity_timeout"`
		Backends        []any `json:"backends"`
	}
	n.mustXlane(&s, "service", "update", "aff", "--affinity-timeout", "60")
	if s.AffinityTimeout != 60 || len(s.Backends) != 3 {
		t.Errorf("service update --affinity-timeout 60: timeout %d, %d backends; want 60 and 3", s.AffinityTimeout, len(s.Backends))
	}
}
