package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

// nameServer answers every connection with its name, then echoes lines.
type nameServer struct {
	name  string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startNameServer(t *testing.T, netns, name string, addr netip.AddrPort) *nameServer {
	t.Helper()
	s := &nameServer{name: name}
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		s.ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, netns, err)
	}
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go func() {
				fmt.Fprintln(c, s.name)
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(l))
				}
			}()
		}
	}()
	t.Cleanup(s.kill)
	return s
}

// kill is a crashed backend: listener and every connection gone.
func (s *nameServer) kill() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// client is one persistent connection to a VIP and the backend it got.
type client struct {
	conn    net.Conn
	r       *bufio.Reader
	backend string
}

func dialVIP(t *testing.T, netns string, vip netip.AddrPort) *client {
	t.Helper()
	var c net.Conn
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", vip.String(), 3*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %s: %v", vip, netns, err)
	}
	cl := &client{conn: c, r: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	name, err := cl.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read backend name via %s: %v", vip, err)
	}
	cl.backend = strings.TrimSpace(name)
	t.Cleanup(func() { c.Close() })
	return cl
}

// alive reports whether the connection still carries data both ways.
func (c *client) alive() bool {
	c.conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.conn.Write([]byte("ping\n")); err != nil {
		return false
	}
	l, err := c.r.ReadString('\n')
	return err == nil && l == "ping\n"
}

// client c ─┐                       ┌─ b1 :8080
// outside ──┼─ VIP 10.96.0.10:80 ───┼─ b2 :8080   (Maglev in the tc program)
//
//	│                       └─ b3 :8080
func TestServiceLoadBalancer(t *testing.T) {
	var out string
	n := newNode(t, withOutside(&out, "1500"))
	runIn(t, out, "ip", "route", "add", "10.96.0.0/24", "via", "192.0.2.2")
	runIn(t, out, "ip", "-6", "route", "add", "fd00:96::/64", "via", "2001:db8:83::2")
	n.mustXlane(nil, "network", "create", "svc", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--masquerade=false")
	c := newNetns(t, "c")
	n.mustXlane(nil, "endpoint", "add", "svc", "--netns", c)
	servers := map[string]*nameServer{}
	var b4, b6 []string
	for i := 1; i <= 3; i++ {
		b := newNetns(t, "b")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "svc", "--netns", b)
		name := fmt.Sprintf("b%d", i)
		servers[name] = startNameServer(t, b, name, netip.AddrPortFrom(ep.IPs[0], 8080))
		startNameServer(t, b, name, netip.AddrPortFrom(ep.IPs[1], 8080))
		b4 = append(b4, netip.AddrPortFrom(ep.IPs[0], 8080).String())
		b6 = append(b6, netip.AddrPortFrom(ep.IPs[1], 8080).String())
	}
	vip := netip.MustParseAddrPort("10.96.0.10:80")
	vip6 := netip.MustParseAddrPort("[fd00:96::10]:80")
	args := []string{"service", "create", "web", "--vip", vip.String() + "/tcp"}
	for _, b := range b4 {
		args = append(args, "--backend", b)
	}
	n.mustXlane(nil, args...)
	args = []string{"service", "create", "web6", "--vip", vip6.String() + "/tcp"}
	for _, b := range b6 {
		args = append(args, "--backend", b)
	}
	n.mustXlane(nil, args...)

	spread := func(from string, v netip.AddrPort, conns int) map[string]int {
		got := map[string]int{}
		for i := 0; i < conns; i++ {
			cl := dialVIP(t, from, v)
			got[cl.backend]++
			cl.conn.Close()
		}
		return got
	}
	for _, tc := range []struct {
		from string
		vip  netip.AddrPort
	}{{c, vip}, {c, vip6}, {out, vip}, {out, vip6}, {n.netns, vip}, {n.netns, vip6}} {
		got := spread(tc.from, tc.vip, 60)
		if len(got) != 3 {
			t.Errorf("60 connections from %s to %s reached %v, want all three backends", tc.from, tc.vip, got)
		}
	}

	// Persistent connections, then: remove b2 from the service and kill
	// b1's process. Every connection to b2 and b3 must live on.
	var held []*client
	for i := 0; i < 24; i++ {
		held = append(held, dialVIP(t, c, vip))
	}
	n.mustXlane(nil, "service", "update", "web", "--backend", b4[0], "--backend", b4[2])
	servers["b1"].kill()
	time.Sleep(200 * time.Millisecond)
	kept := map[string]int{}
	for _, cl := range held {
		switch ok := cl.alive(); {
		case cl.backend == "b1" && ok:
			t.Errorf("a connection to killed b1 still answers")
		case cl.backend != "b1" && !ok:
			t.Errorf("connection to %s broke after b2's removal and b1's kill", cl.backend)
		case ok:
			kept[cl.backend]++
		}
	}
	if kept["b2"] == 0 || kept["b3"] == 0 {
		t.Errorf("held connections per backend %v: want some to b2 (removed) and b3 alive", kept)
	}
	// New flows never go to removed b2; those hashed to dead b1 fail.
	for i := 0; i < 20; i++ {
		var conn net.Conn
		ns.WithNetNSPath(nsPath(c), func(ns.NetNS) error {
			conn, _ = net.DialTimeout("tcp", vip.String(), time.Second)
			return nil
		})
		if conn == nil {
			continue
		}
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		name, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if strings.TrimSpace(name) == "b2" {
			t.Fatalf("a new connection reached removed backend b2")
		}
	}
	n.mustXlane(nil, "service", "rm", "web", "web6")
	var svcs []any
	n.mustXlane(&svcs, "service", "ls")
	if len(svcs) != 0 {
		t.Errorf("services after rm: %v", svcs)
	}
}
