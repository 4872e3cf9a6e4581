package e2e

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
)

// Hairpin, reply-tuple clashes and ICMP errors of translated flows, with
// real traffic (bpf/lib/ct_nat.h; the prog.Run side is
// internal/bpf/ct_both_test.go).

// wantNATFlow checks conntrack holds an original entry translated both
// ways (dnat+snat).
func wantNATFlow(t *testing.T, n *node, what string) {
	t.Helper()
	var flows []api.Flow
	n.mustXlane(&flows, "ct", "ls", "--limit", "0")
	for _, f := range flows {
		if f.NAT == "dnat+snat" && f.Direction == "original" {
			return
		}
	}
	t.Errorf("%s: no dnat+snat flow in conntrack: %+v", what, flows)
}

//	c1 --- node [xlaned] up0 192.0.2.2 ==== outside
//
// c1 connects to the node's address on its own published port, and to a
// service whose backend it is: its own server must get the connection (from
// the node's address) and the payload must arrive intact.
func TestNATHairpin(t *testing.T) {
	for _, mode := range []string{"tc", "xdp"} {
		t.Run(mode, func(t *testing.T) {
			var out string
			n := newNode(t, withOutsideRoutes(&out, "1500", false))
			n.mustXlane(nil, "network", "create", "hp", "--subnet", "10.84.0.0/24", "--subnet", "fd00:84::/64", "--mode", mode)
			c1, c2 := newNetns(t, "c"), newNetns(t, "c")
			var e1 api.EndpointInfo
			n.mustXlane(&e1, "endpoint", "add", "hp", "--netns", c1)
			n.mustXlane(nil, "endpoint", "add", "hp", "--netns", c2)
			node4, node6 := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8:83::2")
			n.mustXlane(nil, "endpoint", "publish", e1.ID, "--port", "8080:80/tcp")
			for _, c := range []struct {
				name         string
				listen, dial netip.AddrPort
			}{
				{"ipv4 own published port", netip.AddrPortFrom(e1.IPs[0], 80), netip.AddrPortFrom(node4, 8080)},
				{"ipv6 own published port", netip.AddrPortFrom(e1.IPs[1], 80), netip.AddrPortFrom(node6, 8080)},
			} {
				t.Run(c.name, func(t *testing.T) {
					transferVia(t, c1, c1, c.listen, c.dial, bulk/4)
					wantNATFlow(t, n, c.name)
					// Another container of the node still reaches it
					// (DNAT only).
					transferVia(t, c2, c1, c.listen, c.dial, bulk/8)
				})
			}
			t.Run("ipv4 service it backs", func(t *testing.T) {
				n.mustXlane(nil, "service", "create", "self", "--vip", "10.96.4.1:80/tcp",
					"--backend", netip.AddrPortFrom(e1.IPs[0], 8081).String())
				transferVia(t, c1, c1, netip.AddrPortFrom(e1.IPs[0], 8081), netip.MustParseAddrPort("10.96.4.1:80"), bulk/4)
			})
		})
	}
}

// dialFrom connects from netns to dst from the fixed local address local
// (SO_REUSEADDR: several connections may share it towards different
// destinations, as Linux's connect() does with ephemeral ports).
func dialFrom(t *testing.T, netns string, local, dst netip.AddrPort) *client {
	t.Helper()
	var c net.Conn
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(local),
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
				})
				return errors.Join(err, serr)
			}}
		var err error
		c, err = d.DialContext(context.Background(), "tcp", dst.String())
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %s in %s: %v", dst, local, netns, err)
	}
	cl := &client{conn: c, r: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	name, err := cl.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read backend name via %s: %v", dst, err)
	}
	cl.backend = strings.TrimSpace(name)
	t.Cleanup(func() { c.Close() })
	return cl
}

// Two services with one common backend, and one client port used towards
// both VIPs (and towards the backend directly): the reply tuples clash, the
// datapath remaps the later flows' source port, and every connection
// carries data.
func TestNATReplyClash(t *testing.T) {
	var out string
	n := newNode(t, withOutside(&out, "1500"))
	n.mustXlane(nil, "network", "create", "cl", "--subnet", "10.85.0.0/24", "--subnet", "fd00:85::/64", "--masquerade=false")
	c, b := newNetns(t, "c"), newNetns(t, "b")
	var ec, eb api.EndpointInfo
	n.mustXlane(&ec, "endpoint", "add", "cl", "--netns", c)
	n.mustXlane(&eb, "endpoint", "add", "cl", "--netns", b)
	for i, fam := range []struct{ vip1, vip2 string }{
		{"10.96.6.1:80", "10.96.6.2:80"},
		{"[fd00:96::61]:80", "[fd00:96::62]:80"},
	} {
		backend := netip.AddrPortFrom(eb.IPs[i], 8080)
		startNameServer(t, b, "b", backend)
		suffix := []string{"4", "6"}[i]
		n.mustXlane(nil, "service", "create", "one"+suffix, "--vip", fam.vip1+"/tcp", "--backend", backend.String())
		n.mustXlane(nil, "service", "create", "two"+suffix, "--vip", fam.vip2+"/tcp", "--backend", backend.String())
		local := netip.AddrPortFrom(ec.IPs[i], 45000)
		var conns []*client
		for _, dst := range []netip.AddrPort{netip.MustParseAddrPort(fam.vip1), netip.MustParseAddrPort(fam.vip2), backend} {
			conns = append(conns, dialFrom(t, c, local, dst))
		}
		for round := 0; round < 3; round++ {
			for j, cl := range conns {
				if cl.backend != "b" || !cl.alive() {
					t.Errorf("ipv%s: connection %d from %s (backend %q) does not carry data", suffix, j, local, cl.backend)
				}
			}
		}
		wantNATFlow(t, n, "ipv"+suffix+" clash")
	}
}

// A connected UDP socket of a masquerading container sends to a port
// nobody listens on outside: the outside's port unreachable, addressed to
// the node, must reach the container translated (ECONNREFUSED). And a
// router behind the outside with a smaller MTU: its frag-needed / packet
// too big for a masqueraded TCP flow must reach the container, or the
// transfer stalls in a PMTU black hole.
//
//	c1 --- node [xlaned, masquerade] up0 ==== out (router) mid0 ==mtu 1280== far0 far
func TestNATICMPErrors(t *testing.T) {
	for _, mode := range []string{"tc", "xdp"} {
		t.Run(mode, func(t *testing.T) {
			var out string
			n := newNode(t, withOutsideRoutes(&out, "1500", false))
			n.mustXlane(nil, "network", "create", "ie", "--subnet", "10.86.0.0/24", "--subnet", "fd00:86::/64", "--mode", mode)
			c1 := newNetns(t, "c")
			n.mustXlane(nil, "endpoint", "add", "ie", "--netns", c1)
			far := newNetns(t, "far")
			runIn(t, out, "ip", "link", "add", "mid0", "mtu", "1280", "type", "veth", "peer", "name", "far0", "netns", nsPath(far))
			for _, cmd := range [][]string{
				{"ip", "addr", "add", "198.18.0.1/24", "dev", "mid0"},
				{"ip", "addr", "add", "2001:db8:86::1/64", "dev", "mid0", "nodad"},
				{"ip", "link", "set", "mid0", "up"},
				{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"},
			} {
				runIn(t, out, cmd...)
			}
			for _, cmd := range [][]string{
				{"ip", "addr", "add", "198.18.0.2/24", "dev", "far0"},
				{"ip", "addr", "add", "2001:db8:86::2/64", "dev", "far0", "nodad"},
				{"ip", "link", "set", "far0", "up"},
				{"ip", "link", "set", "lo", "up"},
				{"ip", "route", "add", "default", "via", "198.18.0.1"},
				{"ip", "-6", "route", "add", "default", "via", "2001:db8:86::1"},
			} {
				runIn(t, far, cmd...)
			}

			t.Run("port unreachable", func(t *testing.T) {
				for _, dst := range []string{"192.0.2.1:7999", "[2001:db8:83::1]:7999"} {
					err := ns.WithNetNSPath(nsPath(c1), func(ns.NetNS) error {
						conn, err := net.Dial("udp", dst)
						if err != nil {
							return err
						}
						defer conn.Close()
						buf := make([]byte, 64)
						for try := 0; try < 3; try++ {
							conn.Write([]byte("anyone?"))
							conn.SetReadDeadline(time.Now().Add(time.Second))
							_, err = conn.Read(buf)
							if errors.Is(err, syscall.ECONNREFUSED) {
								return nil
							}
						}
						return err
					})
					if err != nil {
						t.Errorf("UDP to %s from a masquerading container: %v, want ECONNREFUSED (the port unreachable, translated)", dst, err)
					}
				}
			})
			t.Run("path MTU behind a router", func(t *testing.T) {
				// ping first, while c1 knows no path MTU: the router's
				// error about a masqueraded echo request.
				for _, tc := range []struct{ dst, want string }{
					{"198.18.0.2", "Frag needed and DF set (mtu = 1280)"},
					{"2001:db8:86::2", "Packet too big: mtu=1280"},
				} {
					o, _ := inNS(c1, "ping", "-M", "do", "-s", "1400", "-c", "2", "-i", "0.3", "-W", "1", tc.dst).CombinedOutput()
					if !strings.Contains(string(o), tc.want) {
						t.Errorf("ping -M do -s 1400 %s: want the router's error %q, got:\n%s", tc.dst, tc.want, o)
					}
				}
				// far0 keeps MTU 1500: far advertises MSS 1460, so only
				// the router's ICMP error makes the sender segment smaller.
				transfer(t, c1, far, netip.MustParseAddr("198.18.0.2"), bulk/4)
				transfer(t, c1, far, netip.MustParseAddr("2001:db8:86::2"), bulk/4)
			})
		})
	}
}
