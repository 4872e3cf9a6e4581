package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/features"
)

// The netkit peer program runs the tc pipeline (bpf/lib/skb_endpoint.h):
// every verdict case of the tc program must come out the same, except that
// a local endpoint is reached with bpf_redirect to its host device (whose
// own program counts the delivery) rather than bpf_redirect_peer.
func TestNetkitFromEndpoint(t *testing.T) {
	h := newHarness(t)
	nk := netkitObjs(t, h)
	var cases []verdictCase
	for _, f := range []func(testing.TB) []verdictCase{
		peerRedirectCases, spoofCases, linkScopeCases, ttlCases, nonIPCases, malformedCases, l4MalformedCases, fibCases,
	} {
		cases = append(cases, f(t)...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.want
			w.peer = 0
			w.hook = HookNetkit
			ifindex := h.links[tc.dev]
			h.resetMetrics(t)
			ret, out, err := h.runProg(nk.FromEndpoint, tc.frame, ifindex)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			h.verify(t, ifindex, tc.frame, tc.frame, ret, out, w)
		})
	}
}

// The primary program counts what enters a container, on the endpoint the
// destination address belongs to; frames for no endpoint on the node.
func TestNetkitToEndpoint(t *testing.T) {
	h := newHarness(t)
	nk := netkitObjs(t, h)
	arp := nonIPCases(t)[0].frame
	for _, tc := range []struct {
		name    string
		frame   []byte
		ifindex int
	}{
		{"ipv4 to an endpoint", tcp4(t, epPeer.v4), epPeer.ifindex},
		{"ipv6 to an endpoint", tcp6(t, epPeer.v6), epPeer.ifindex},
		{"to no endpoint", tcp4(t, addr("203.0.113.9")), 0},
		{"non-IP", arp, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.resetMetrics(t)
			// skb->dev is the container side here: an ifindex the node's
			// namespace does not know.
			ret, out, err := h.runProgFrom(nk.ToEndpoint, tc.frame, h.links[devEP0+"p"], 0)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if ret != actPass || string(out[:len(tc.frame)]) != string(tc.frame) {
				t.Fatalf("verdict %d (frame changed: %v), want %d and the frame untouched", ret, string(out[:len(tc.frame)]) != string(tc.frame), actPass)
			}
			n := uint64(len(tc.frame))
			want := map[MetricsKey]MetricsVal{metricsKeyAt(HookNetkit, tc.ifindex, tcXlReasonXL_DELIVER, DirIngress): {Packets: 1, Bytes: n}}
			if got := h.metrics(t); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("metrics %s, want %s", formatMetrics(got), formatMetrics(want))
			}
		})
	}
}

func netkitObjs(tb testing.TB, h *harness) *NetkitObjects {
	tb.Helper()
	return NetkitFor(tb, h.objs)
}

// runProg runs prog on frame as if it arrived on ifindex, in the test netns.
func (h *harness) runProg(prog *ebpf.Program, frame []byte, ifindex int) (int32, []byte, error) {
	return h.runProgFrom(prog, frame, ifindex, ifindex)
}

// runProgFrom runs prog on frame on device ifindex, received by device iif
// (0: sent by the node, or by an endpoint through netkit's redirect).
func (h *harness) runProgFrom(prog *ebpf.Program, frame []byte, ifindex, iif int) (int32, []byte, error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
		Context: skbContext{IngressIfindex: uint32(iif), Ifindex: uint32(ifindex)}}
	r, err := RunVerdict(h.do, prog, h.objs.Metrics(), opts)
	return int32(r), opts.DataOut, err
}

//	test netns (the node)                         container netns
//	+---------------------------------------+    +-----------------------+
//	| xl-nka (primary) [peer prog, prim prog]-----| eth0 10.0.7.2 (peer)  | a
//	| xl-nkb (primary) [peer prog, prim prog]-----| eth0 10.0.7.3 (peer)  | b
//	| lo: 10.0.7.1 (the gateway)            |    +-----------------------+
//	+---------------------------------------+
//
// Real netkit pairs in L3 and L2 mode, created with the blackhole default
// policy: nothing passes before the programs are attached; afterwards UDP
// goes from a to b through the peer program's redirect and the primary
// program's count, and to the node through Linux.
func TestNetkitDevices(t *testing.T) {
	features.Require(t, features.Netkit)
	for _, mode := range []netlink.NetkitMode{netlink.NETKIT_MODE_L3, netlink.NETKIT_MODE_L2} {
		name := map[netlink.NetkitMode]string{netlink.NETKIT_MODE_L3: "l3", netlink.NETKIT_MODE_L2: "l2"}[mode]
		t.Run(name, func(t *testing.T) { testNetkitDevices(t, mode) })
	}
}

type nkEndpoint struct {
	primary netlink.Link
	ns      netns.NsHandle
	addr    netip.Addr
}

func testNetkitDevices(t *testing.T, mode netlink.NetkitMode) {
	h := newHarness(t)
	nk := netkitObjs(t, h)
	nl, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	gw := addr("10.0.7.1")
	lo, _ := nl.LinkByName("lo")
	if err := nl.AddrAdd(lo, &netlink.Addr{IPNet: prefix("10.0.7.1/32")}); err != nil {
		t.Fatal(err)
	}
	var eps []nkEndpoint
	for i, name := range []string{"xl-nka", "xl-nkb"} {
		ep := nkEndpoint{addr: addr(fmt.Sprintf("10.0.7.%d", i+2))}
		ep.ns = newContainerNS(t)
		ep.primary = addNetkit(t, nl, name, mode, ep.ns)
		configureContainer(t, ep.ns, ep.addr, gw)
		if err := nl.RouteAdd(&netlink.Route{LinkIndex: ep.primary.Attrs().Index, Dst: prefix(ep.addr.String() + "/32"), Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatal(err)
		}
		peerMAC := containerMAC(t, ep.ns)
		val := NewEndpointVal(ep.primary.Attrs().Index, 1, peerMAC, ep.primary.Attrs().HardwareAddr, 1500, false)
		if err := h.objs.Endpoints().Put(KeyFromAddr(ep.addr), val); err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
	}
	if mode == netlink.NETKIT_MODE_L2 {
		for _, ep := range eps {
			// The containers ARP for the gateway: answer with proxy ARP.
			if err := h.do(func() error {
				return writeSysctl("net/ipv4/conf/"+ep.primary.Attrs().Name+"/proxy_arp", "1")
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := eps[0], eps[1]

	if udpExchange(t, a.ns, b.ns, b.addr, 1*time.Second) == nil {
		t.Fatal("UDP passed before any program was attached: the blackhole policy does not hold")
	}
	h.resetMetrics(t)
	for _, ep := range eps {
		for _, at := range []struct {
			prog *ebpf.Program
			typ  ebpf.AttachType
		}{{nk.FromEndpoint, ebpf.AttachNetkitPeer}, {nk.ToEndpoint, ebpf.AttachNetkitPrimary}} {
			var l link.Link
			err := h.do(func() (err error) {
				l, err = link.AttachNetkit(link.NetkitOptions{Interface: ep.primary.Attrs().Index, Program: at.prog, Attach: at.typ})
				return err
			})
			if err != nil {
				t.Fatalf("attach %s to %s: %v", at.typ, ep.primary.Attrs().Name, err)
			}
			t.Cleanup(func() { l.Close() })
		}
	}
	if err := udpExchange(t, a.ns, b.ns, b.addr, 5*time.Second); err != nil {
		t.Fatalf("a -> b: %v (metrics %s)", err, formatMetrics(h.metrics(t)))
	}
	if err := udpExchange(t, a.ns, h.ns, gw, 5*time.Second); err != nil {
		t.Fatalf("a -> node: %v (metrics %s)", err, formatMetrics(h.metrics(t)))
	}
	m := h.metrics(t)
	if got := m[metricsKeyAt(HookNetkit, a.primary.Attrs().Index, fwdPeer, DirEgress)]; got.Packets < 1 {
		t.Errorf("fwd_peer from a = %d packets, want >= 1: %s", got.Packets, formatMetrics(m))
	}
	if got := m[metricsKeyAt(HookNetkit, b.primary.Attrs().Index, tcXlReasonXL_DELIVER, DirIngress)]; got.Packets < 1 {
		t.Errorf("deliver to b = %d packets, want >= 1: %s", got.Packets, formatMetrics(m))
	}
	if got := m[metricsKeyAt(HookNetkit, a.primary.Attrs().Index, passNotFwded, DirEgress)]; got.Packets < 1 {
		t.Errorf("pass_not_fwded (to the node) from a = %d packets, want >= 1: %s", got.Packets, formatMetrics(m))
	}
	for k, v := range m {
		if Reason(k.Reason).IsDrop() {
			t.Errorf("drops: %s %s %d", Reason(k.Reason), Dir(k.Dir), v.Packets)
		}
	}
}

// writeSysctl writes a sysctl of the calling thread's network namespace.
func writeSysctl(path, val string) error {
	return os.WriteFile("/proc/sys/"+path, []byte(val), 0o644)
}

func newContainerNS(tb testing.TB) netns.NsHandle {
	tb.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		tb.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		panic(err) // the thread is in the wrong namespace: never reuse it
	}
	tb.Cleanup(func() { ns.Close() })
	return ns
}

// addNetkit creates a netkit pair in nl's namespace (blackhole policy both
// ways) and moves the peer into ns as eth0.
func addNetkit(tb testing.TB, nl *netlink.Handle, name string, mode netlink.NetkitMode, ns netns.NsHandle) netlink.Link {
	tb.Helper()
	nkl := &netlink.Netkit{
		LinkAttrs: netlink.LinkAttrs{Name: name},
		Mode:      mode, Policy: netlink.NETKIT_POLICY_BLACKHOLE, PeerPolicy: netlink.NETKIT_POLICY_BLACKHOLE,
	}
	nkl.SetPeerAttrs(&netlink.LinkAttrs{Name: name + "p", Namespace: netlink.NsFd(ns)})
	if err := nl.LinkAdd(nkl); err != nil {
		tb.Fatalf("create netkit %s: %v", name, err)
	}
	l, err := nl.LinkByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	if err := nl.LinkSetUp(l); err != nil {
		tb.Fatal(err)
	}
	cl, err := netlink.NewHandleAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	peer, err := cl.LinkByName(name + "p")
	if err != nil {
		tb.Fatalf("peer of %s in its namespace: %v", name, err)
	}
	if err := cl.LinkSetName(peer, "eth0"); err != nil {
		tb.Fatal(err)
	}
	return l
}

func configureContainer(tb testing.TB, ns netns.NsHandle, a, gw netip.Addr) {
	tb.Helper()
	cl, err := netlink.NewHandleAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	eth, err := cl.LinkByName("eth0")
	if err != nil {
		tb.Fatal(err)
	}
	lo, _ := cl.LinkByName("lo")
	for _, step := range []error{
		cl.AddrAdd(eth, &netlink.Addr{IPNet: prefix(a.String() + "/32")}),
		cl.LinkSetUp(eth), cl.LinkSetUp(lo),
		cl.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: prefix(gw.String() + "/32"), Scope: netlink.SCOPE_LINK}),
		cl.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: prefix("0.0.0.0/0"), Gw: gw.AsSlice()}),
	} {
		if step != nil {
			tb.Fatalf("configure container %s: %v", a, step)
		}
	}
}

func containerMAC(tb testing.TB, ns netns.NsHandle) net.HardwareAddr {
	tb.Helper()
	cl, err := netlink.NewHandleAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	eth, err := cl.LinkByName("eth0")
	if err != nil {
		tb.Fatal(err)
	}
	if len(eth.Attrs().HardwareAddr) == 0 {
		return make(net.HardwareAddr, 6)
	}
	return eth.Attrs().HardwareAddr
}

// inNS runs fn on a locked thread inside ns.
func inNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return // the thread dies locked
		}
		errc <- fn()
	}()
	return <-errc
}

// udpExchange sends a datagram from namespace from to dst, listened on in
// namespace to, and reports whether it arrived within wait.
func udpExchange(tb testing.TB, from, to netns.NsHandle, dst netip.Addr, wait time.Duration) error {
	tb.Helper()
	var ln net.PacketConn
	if err := inNS(to, func() (err error) {
		ln, err = net.ListenPacket("udp4", netip.AddrPortFrom(dst, 0).String())
		return err
	}); err != nil {
		tb.Fatalf("listen on %s: %v", dst, err)
	}
	defer ln.Close()
	msg := []byte("xlane netkit")
	deadline := time.Now().Add(wait)
	ln.SetReadDeadline(deadline)
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		n, _, err := ln.ReadFrom(buf)
		if err == nil && string(buf[:n]) != string(msg) {
			err = fmt.Errorf("received %q", buf[:n])
		}
		got <- err
	}()
	for time.Now().Before(deadline) {
		err := inNS(from, func() error {
			c, err := net.Dial("udp4", ln.LocalAddr().String())
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(msg)
			return err
		})
		if err != nil && !errors.Is(err, unix.ENETUNREACH) && !errors.Is(err, unix.EPERM) {
			tb.Fatalf("send to %s: %v", dst, err)
		}
		select {
		case err := <-got:
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return <-got
}
