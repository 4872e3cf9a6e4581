package e2e

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

// dialFromPort connects from netns, bound to local port port, to dst and
// returns what the server sent before closing (its name), or the error.
func dialFromPort(netns string, port uint16, dst netip.AddrPort, timeout time.Duration) (string, error) {
	var got string
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		local := &net.TCPAddr{Port: int(port)}
		d := net.Dialer{Timeout: timeout, LocalAddr: local, Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) })
			return serr
		}}
		c, err := d.Dial("tcp", dst.String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		b, err := io.ReadAll(c)
		got = strings.TrimSpace(string(b))
		return err
	})
	return got, err
}

// TestServiceClientPortReuse: a client that opens a new connection from
// the port of a closed one (port reuse: the same 4-tuple to the VIP) gets
// the service as it is now, not the closed flow's translation, which
// conntrack keeps ~10 s after the close (plus the GC's grace): after a
// backend change the new backend answers, after the service's deletion
// nothing does. The backends close first, so the client's port is free at
// once, as in short request/response traffic. Before the fix (a SYN on a
// closed entry reused its translation) the old backend answered both times.
//
//	client c :47xxx ── VIP 10.96.86.1:80 / [fd00:96::86:1]:80 ──▶ b1 :8080
//	                   (service update: b2)                     ──▶ b2 :8080
//	                   (service rm)                             ──▶ nothing
func TestServiceClientPortReuse(t *testing.T) {
	n := newNode(t)
	n.mustXlane(nil, "network", "create", "reu", "--subnet", "10.86.0.0/24", "--subnet", "fd00:86::/64", "--masquerade=false")
	c := newNetns(t, "c")
	n.mustXlane(nil, "endpoint", "add", "reu", "--netns", c)
	var be [2][2]string // [backend][family]
	for i := range 2 {
		b := newNetns(t, "b")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "reu", "--netns", b)
		for f := range 2 {
			a := netip.AddrPortFrom(ep.IPs[f], 8080)
			sharedServer(t, b, fmt.Sprintf("b%d", i+1), a) // writes its name, closes first
			be[i][f] = a.String()
		}
	}
	for f, vip := range []netip.AddrPort{
		netip.MustParseAddrPort("10.96.86.1:80"), netip.MustParseAddrPort("[fd00:96::86:1]:80"),
	} {
		name := fmt.Sprintf("ru%d", f)
		port := uint16(47100 + f)
		t.Run(vip.Addr().String(), func(t *testing.T) {
			n.mustXlane(nil, "service", "create", name, "--vip", vip.String()+"/tcp", "--backend", be[0][f])
			if got, err := dialFromPort(c, port, vip, 3*time.Second); err != nil || got != "b1" {
				t.Fatalf("first connection from port %d: answer %q, %v; want b1", port, got, err)
			}
			time.Sleep(200 * time.Millisecond) // the last ACKs
			n.mustXlane(nil, "service", "update", name, "--backend", be[1][f])
			if got, err := dialFromPort(c, port, vip, 3*time.Second); err != nil || got != "b2" {
				t.Errorf("after the backend change, port %d again: answer %q, %v; want b2 (b1: the closed flow's translation reused)", port, got, err)
			}
			time.Sleep(200 * time.Millisecond)
			n.mustXlane(nil, "service", "rm", name)
			got, err := dialFromPort(c, port, vip, time.Second)
			if err == nil || got != "" {
				t.Errorf("after the service's deletion, port %d again: answer %q, %v; want no connection", port, got, err)
			} else {
				t.Logf("after the deletion: %v", err)
			}
		})
	}
}
