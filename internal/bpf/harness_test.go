package bpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf/bpftest"
)

// The harness of the tests of this package: the loaded objects (shared,
// objects_test.go), a private netns (bpftest.NS) with the devices, routes
// and neighbours of the topology below (tc_test.go), the endpoints seeded,
// running a program and reading its counters; then the verdict tables'
// types and checks. The XDP tests extend it (newXDPHarness, xdp_test.go).

// ---------------------------------------------------------------------------
// Harness: objects, a private netns, running the program, reading metrics.

type harness struct {
	objs  *Objects
	net   *bpftest.NS
	ns    netns.NsHandle // net's handle
	links map[string]int // device name -> ifindex inside ns
}

// skbContext is the leading part of struct __sk_buff, up to ifindex: the
// prefix BPF_PROG_TEST_RUN accepts for tc programs. Everything before mark
// must be zero; the kernel takes the device from ifindex.
type skbContext struct {
	Len, PktType, Mark, QueueMapping, Protocol uint32
	VlanPresent, VlanTCI, VlanProto, Priority  uint32
	IngressIfindex, Ifindex                    uint32
}

// harnessCfg is what a harness is built with: the objects (ObjectsFor's
// dir and Options) and whether the XDP tests' devices, routes, neighbours
// and devmap entries are added (addXDP, xdp_test.go).
type harnessCfg struct {
	dir string
	opt Options
	xdp bool
}

// newHarness is the harness of the tc tests, on the shared objects of o.
func newHarness(tb testing.TB, o ...Options) *harness {
	tb.Helper()
	var c harnessCfg
	if len(o) > 0 {
		c.opt = o[0]
	}
	return buildHarness(tb, c)
}

// newXDPHarness is the harness of the XDP tests.
func newXDPHarness(tb testing.TB) *harness {
	tb.Helper()
	return buildHarness(tb, harnessCfg{xdp: true})
}

// buildHarness is the one constructor of the harness of this package's
// tests (the firewall's, package bpf_test, has its own over the same
// bpftest.NS and ObjectsFor: newFwHarness).
func buildHarness(tb testing.TB, c harnessCfg) *harness {
	tb.Helper()
	ns := bpftest.NewNS(tb) // skips unless root
	objs := ObjectsFor(tb, c.dir, c.opt)
	h := &harness{objs: objs, net: ns, ns: ns.Handle(), links: map[string]int{}}
	h.setupNetwork(tb)
	for _, ep := range endpoints {
		val := NewEndpointVal(h.ifindexOf(ep), 1, ep.mac, ep.hostMAC, 1500, false)
		for _, a := range []netip.Addr{ep.v4, ep.v6} {
			if err := objs.Endpoints().Put(KeyFromAddr(a), val); err != nil {
				tb.Fatalf("seed endpoint %s: %v", a, err)
			}
		}
	}
	if c.xdp {
		h.addXDP(tb)
	}
	return h
}

// do runs fn on a thread inside the test netns. BPF_PROG_TEST_RUN builds the
// skb in the calling thread's netns, so every run goes through here.
func (h *harness) do(fn func() error) error { return h.net.Do(fn) }

// netlinkIn returns a netlink handle in h's netns and a check that fails
// tb naming what failed.
func (h *harness) netlinkIn(tb testing.TB) (*netlink.Handle, func(what string, err error)) {
	tb.Helper()
	nl, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		tb.Fatalf("netlink handle: %v", err)
	}
	return nl, func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
	}
}

func (h *harness) setupNetwork(tb testing.TB) {
	tb.Helper()
	nl, must := h.netlinkIn(tb)
	defer nl.Close()

	for name, hw := range map[string]net.HardwareAddr{devEP0: ep0MAC, devEP1: ep1MAC, devUp: upMAC} {
		must("add veth "+name, nl.LinkAdd(&netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: hw},
			PeerName:  name + "p",
		}))
	}
	for _, name := range []string{devLo, devEP0, devEP0 + "p", devEP1, devEP1 + "p", devUp, devUp + "p"} {
		link, err := nl.LinkByName(name)
		must("find "+name, err)
		must("up "+name, nl.LinkSetUp(link))
		h.links[name] = link.Attrs().Index
	}
	up, _ := nl.LinkByName(devUp)
	for _, p := range []string{"198.51.100.1/24", "2001:db8:100::1/64"} {
		must("addr "+p, nl.AddrAdd(up, &netlink.Addr{IPNet: prefix(p), Flags: unix.IFA_F_NODAD}))
	}
	// Even with NODAD the kernel installs an IPv6 address's local route
	// from a workqueue: wait for it, or FIB answers depend on timing.
	for deadline := time.Now().Add(3 * time.Second); ; {
		rs, err := nl.RouteGet(net.ParseIP("2001:db8:100::1"))
		if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("local route of 2001:db8:100::1 did not appear: %v %v", rs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, gw := range []string{"198.51.100.2", "2001:db8:100::2"} {
		must("neigh "+gw, nl.NeighAdd(&netlink.Neigh{
			LinkIndex: up.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: net.ParseIP(gw), HardwareAddr: gwMAC,
		}))
	}
	for dst, gw := range map[string]string{"203.0.113.0/24": "198.51.100.2", "2001:db8:203::/48": "2001:db8:100::2"} {
		must("route "+dst, nl.RouteAdd(&netlink.Route{
			LinkIndex: up.Attrs().Index, Dst: prefix(dst), Gw: net.ParseIP(gw),
		}))
	}
	for _, dst := range []string{"192.0.2.0/24", "2001:db8:bad::/48"} {
		must("blackhole "+dst, nl.RouteAdd(&netlink.Route{Dst: prefix(dst), Type: unix.RTN_BLACKHOLE}))
	}

	sysctls := []struct{ path, val string }{
		{"net/ipv4/conf/all/forwarding", "1"},
		{"net/ipv6/conf/all/forwarding", "1"},
		{"net/ipv4/conf/" + devEP1 + "/forwarding", "0"},
		{"net/ipv6/conf/" + devEP1 + "/forwarding", "0"},
	}
	must("sysctls", h.do(func() error {
		for _, s := range sysctls {
			if err := os.WriteFile("/proc/sys/"+s.path, []byte(s.val), 0); err != nil {
				return err
			}
		}
		return nil
	}))
}

func (h *harness) ifindexOf(ep endpoint) int {
	if ep.dev == "" {
		return ep.ifindex
	}
	return h.links[ep.dev]
}

// run feeds frame to xlane_from_endpoint as if it arrived on ifindex
// (0: no context, the kernel then uses loopback).
func (h *harness) run(frame []byte, ifindex int) (ret int32, out []byte, err error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	if ifindex != 0 {
		opts.Context = skbContext{IngressIfindex: uint32(ifindex), Ifindex: uint32(ifindex)}
	}
	r, err := RunVerdict(h.do, h.objs.FromEndpoint(), h.objs.Metrics(), opts)
	return int32(r), opts.DataOut, err
}

// attach attaches xlane_from_endpoint to dev's tcx ingress until the test ends.
func (h *harness) attach(tb testing.TB, dev string) {
	tb.Helper()
	h.attachTC(tb, dev, h.objs.FromEndpoint()) // tcx, or legacy tc: compat_test.go
}

// send transmits frame as is on dev through an AF_PACKET socket.
func (h *harness) send(tb testing.TB, dev string, frame []byte) {
	tb.Helper()
	err := h.do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: h.links[dev]})
	})
	if err != nil {
		tb.Fatalf("send on %s: %v", dev, err)
	}
}

func (h *harness) resetMetrics(tb testing.TB) {
	tb.Helper()
	var (
		k    MetricsKey
		keys []MetricsKey
		vals []MetricsVal
	)
	it := h.objs.Metrics().Iterate()
	for it.Next(&k, &vals) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		tb.Fatalf("iterate metrics: %v", err)
	}
	for _, k := range keys {
		if err := h.objs.Metrics().Delete(k); err != nil {
			tb.Fatalf("delete metrics key: %v", err)
		}
	}
}

// metrics returns xlane_metrics with the per-CPU values summed.
func (h *harness) metrics(tb testing.TB) map[MetricsKey]MetricsVal {
	tb.Helper()
	var (
		k    MetricsKey
		vals []MetricsVal
		got  = map[MetricsKey]MetricsVal{}
	)
	it := h.objs.Metrics().Iterate()
	for it.Next(&k, &vals) {
		var sum MetricsVal
		for _, v := range vals {
			sum.Packets += v.Packets
			sum.Bytes += v.Bytes
		}
		got[k] = sum
	}
	if err := it.Err(); err != nil {
		tb.Fatalf("iterate metrics: %v", err)
	}
	return got
}

// metricsKey is the key of a count a tc program decided.
func metricsKey(ifindex int, r Reason, d Dir) MetricsKey {
	return metricsKeyAt(HookTC, ifindex, r, d)
}

// metricsKeyAt is the key of a count the program at hook decided.
func metricsKeyAt(hook Hook, ifindex int, r Reason, d Dir) MetricsKey {
	return MetricsKey{Ifindex: uint32(ifindex), Reason: uint8(r), Dir: uint8(d), Hook: uint8(hook)}
}

func formatMetrics(m map[MetricsKey]MetricsVal) string {
	var lines []string
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("\n\tifindex %d %s %s by %s: %d packets %d bytes",
			k.Ifindex, Reason(k.Reason), Dir(k.Dir), Hook(k.Hook), v.Packets, v.Bytes))
	}
	slices.Sort(lines)
	return fmt.Sprint(lines)
}

// ---------------------------------------------------------------------------
// Verdict tables.

// want is what one run must produce.
type want struct {
	ret    int32
	reason Reason // counted egress on the sending device
	// fwd: forwarded with these L2 addresses, TTL/hop limit down by one;
	// nil: the frame leaves the program unchanged.
	fwd *l2
	// peer: ifindex that must count an fwd_peer ingress packet.
	peer int
	// hook: the attach point the counts must name (zero: tc).
	hook Hook
}

type l2 struct{ dst, src net.HardwareAddr }

func toPeer(ep endpoint) want {
	return want{ret: actRedirect, reason: fwdPeer, fwd: &l2{ep.mac, ep.hostMAC}, peer: ep.ifindex}
}
func routed(r Reason, dst, src net.HardwareAddr) want {
	return want{ret: actRedirect, reason: r, fwd: &l2{dst, src}}
}
func passed(r Reason) want  { return want{ret: actPass, reason: r} }
func dropped(r Reason) want { return want{ret: actShot, reason: r} }

type verdictCase struct {
	name  string
	dev   string // device the frame arrives on
	frame []byte
	want  want
}

func runCases(t *testing.T, cases []verdictCase) {
	t.Helper()
	h := newHarness(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { h.check(t, h.links[tc.dev], tc.frame, tc.want) })
	}
}

// check runs frame on ifindex and verifies verdict, output frame and metrics.
func (h *harness) check(t *testing.T, ifindex int, frame []byte, w want) {
	t.Helper()
	h.resetMetrics(t)
	ret, out, err := h.run(frame, ifindex)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	h.verify(t, ifindex, frame, frame, ret, out, w)
}

// verify checks one run of frame on ifindex: verdict, output frame and
// metrics. A forwarded output must match ref (usually frame itself) apart
// from what forwarding changes; any other output must equal frame.
func (h *harness) verify(t *testing.T, ifindex int, frame, ref []byte, ret int32, out []byte, w want) {
	t.Helper()
	if ret != w.ret {
		t.Errorf("return value %d, want %d (metrics: %s)", ret, w.ret, formatMetrics(h.metrics(t)))
	}
	if w.fwd != nil {
		checkForwarded(t, ref, out, w.fwd.dst, w.fwd.src)
	} else if !bytes.Equal(out, frame) {
		t.Errorf("frame changed: %s", frameDiff(out, frame))
	}

	n := uint64(len(frame))
	wantM := map[MetricsKey]MetricsVal{metricsKeyAt(w.hook, ifindex, w.reason, DirEgress): {Packets: 1, Bytes: n}}
	if w.peer != 0 {
		wantM[metricsKeyAt(w.hook, w.peer, fwdPeer, DirIngress)] = MetricsVal{Packets: 1, Bytes: n}
	}
	if got := h.metrics(t); !maps.Equal(got, wantM) {
		t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(wantM))
	}
}

// checkForwarded verifies out is in forwarded: new MACs, TTL or hop limit
// down by one, a correct IPv4 header checksum, every other byte unchanged.
func checkForwarded(t *testing.T, in, out []byte, dst, src net.HardwareAddr) {
	t.Helper()
	if len(out) != len(in) {
		t.Fatalf("output is %d bytes, input %d", len(out), len(in))
	}
	if !bytes.Equal(out[0:6], dst) {
		t.Errorf("dst MAC %v, want %v", net.HardwareAddr(out[0:6]), dst)
	}
	if !bytes.Equal(out[6:12], src) {
		t.Errorf("src MAC %v, want %v", net.HardwareAddr(out[6:12]), src)
	}
	l3 := ethHdrLen
	var hdrLen, ttlOff int
	switch binary.BigEndian.Uint16(in[12:14]) {
	case uint16(layers.EthernetTypeIPv4):
		hdrLen, ttlOff = int(in[l3]&0x0f)*4, 8
		hdr := out[l3 : l3+hdrLen]
		if got, want := binary.BigEndian.Uint16(hdr[10:12]), ipv4HeaderChecksum(hdr); got != want {
			t.Errorf("IPv4 header checksum %#04x, recomputed %#04x", got, want)
		}
	case uint16(layers.EthernetTypeIPv6):
		hdrLen, ttlOff = 40, 7
	default:
		t.Fatalf("forwarded frame with ethertype %#x", in[12:14])
	}
	if got, want := out[l3+ttlOff], in[l3+ttlOff]-1; got != want {
		t.Errorf("TTL/hop limit %d, want %d", got, want)
	}
	// Everything but MACs, TTL and checksum must be untouched, L4 included.
	for i := 12; i < len(in); i++ {
		isTTL := i == l3+ttlOff
		isCsum := hdrLen != 40 && (i == l3+10 || i == l3+11)
		if !isTTL && !isCsum && out[i] != in[i] {
			t.Errorf("byte %d changed: %#02x -> %#02x (L4 starts at %d)", i, in[i], out[i], l3+hdrLen)
		}
	}
}
