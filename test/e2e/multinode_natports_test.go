package e2e

import (
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// testExternalPortReuse: a NodePort reached from outside whose backend is
// the other node's pod takes n1's cluster address and a port of its wide
// range (bpf/lib/ct_nat.h ct_create_ports); here the range is cut to 8
// ports (xlane_config written behind xlaned's back, restored after), so a
// flood of short connections (bench/peers' NodePort row: 12,140 conn/s
// over one backend) needs every port again once its flow is over:
//
//   - 8 connections, opened and reset by the client: every port's flow
//     closed;
//   - 11 s later (a closed flow's 10 s are over; the GC, 10 s of grace
//     after that, has not collected it): 8 more, every one connects
//     (before, the ports were taken until the GC ran: all 8 refused,
//     pass_nat_ports, as bench/peers' row refused 11.7 %);
//   - 8 connections held open to another port of the pod, then a 9th:
//     refused, to Linux untranslated, counted (pass_nat_ports on n1's ul0).
func testExternalPortReuse(t *testing.T, out string, n1, n2 *clusterNode) {
	const lo, hi = 40000, 40007
	m, err := ebpf.LoadPinnedMap(filepath.Join(n1.pinDir, "maps", "xlane_config"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	setRange := func(min, max uint16) (oldMin, oldMax uint16) {
		var c bpf.Config
		if err := m.Lookup(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		oldMin, oldMax = c.ClashPortMin, c.ClashPortMax
		c.ClashPortMin, c.ClashPortMax = min, max
		if err := m.Put(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		return oldMin, oldMax
	}
	oldMin, oldMax := setRange(lo, hi)
	defer setRange(oldMin, oldMax)

	vip := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(n1.under4, port) }
	n1.mustXlane(nil, "service", "create", "reuse-closed", "--vip", vip(30096).String(), "--backend", netip.AddrPortFrom(n2.ip4(), 9196).String())
	n1.mustXlane(nil, "service", "create", "reuse-held", "--vip", vip(30097).String(), "--backend", netip.AddrPortFrom(n2.ip4(), 9197).String())
	acceptAndClose(listenIn(t, n2.pod, netip.AddrPortFrom(n2.ip4(), 9196)))
	held := listenIn(t, n2.pod, netip.AddrPortFrom(n2.ip4(), 9197))
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := held.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()

	// burst opens and resets 8 connections: the client's RST closes the
	// flow (10 s) and leaves no TIME_WAIT at either end. (Were the pod
	// to close first, its TIME_WAIT, 60 s on the translated tuple, could
	// refuse a SYN reusing the port: a retransmission, the flow reopened
	// on another port; lib/ct.h ct_forget.)
	dialReset := func(port uint16) error {
		return ns.WithNetNSPath(nsPath(out), func(ns.NetNS) error {
			c, err := net.DialTimeout("tcp", vip(port).String(), 2*time.Second)
			if err != nil {
				return err
			}
			c.(*net.TCPConn).SetLinger(0)
			return c.Close()
		})
	}
	burst := func(what string) (refused int) {
		for i := range hi - lo + 1 {
			if err := dialReset(30096); err != nil {
				t.Logf("%s, connection %d: %v", what, i, err)
				refused++
			}
		}
		return refused
	}
	before := uplinkCounter(t, n1, "ul0", "pass_nat_ports")
	if n := burst("first 8"); n > 0 {
		t.Fatalf("%d of the first 8 connections failed, on a range of 8 free ports", n)
	}
	time.Sleep(11 * time.Second)
	if n := burst("8 more, 11 s later"); n > 0 {
		t.Errorf("%d of 8 connections refused 11 s after the range's flows closed: the ports of closed flows past their deadline were not taken again", n)
	}
	if n := uplinkCounter(t, n1, "ul0", "pass_nat_ports"); n != before {
		t.Errorf("pass_nat_ports on n1's ul0: %d, want %d (none refused)", n, before)
	}

	// Live flows keep their ports.
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dialHeld := func() (net.Conn, error) {
		var c net.Conn
		err := ns.WithNetNSPath(nsPath(out), func(ns.NetNS) error {
			var err error
			c, err = net.DialTimeout("tcp", vip(30097).String(), 2*time.Second)
			return err
		})
		return c, err
	}
	for i := range hi - lo + 1 {
		c, err := dialHeld()
		if err != nil {
			t.Fatalf("held connection %d: %v", i, err)
		}
		clients = append(clients, c)
	}
	before = uplinkCounter(t, n1, "ul0", "pass_nat_ports")
	if c, err := dialHeld(); err == nil {
		c.Close()
		t.Errorf("a 9th connection got through with 8 held open on a range of 8 ports")
	}
	if n := uplinkCounter(t, n1, "ul0", "pass_nat_ports"); n <= before {
		t.Errorf("pass_nat_ports on n1's ul0: %d, want more than %d (the 9th connection, refused)", n, before)
	}
}
