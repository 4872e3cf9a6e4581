package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Tests for the XDP programs xlane_xdp_from_endpoint (native) and
// xlane_xdp_generic_from_endpoint (generic), run with BPF_PROG_TEST_RUN in
// the private netns of the tc tests (newHarness), which addXDP extends (newXDPHarness):
//
//	xl-pe0   host side of epPeer's veth (xdpPeer): XDP redirects need a real
//	         device in xlane_devmap, so the peer gets one here
//	xl-sm0   host side of epSmall, an endpoint with MTU 1280
//	xl-jb0   host side of epJumbo, an endpoint with MTU 9000
//	xl-nf0   host side of epNoFlag: in xlane_devmap, no XL_EP_XDP_TARGET
//	         (a generic-XDP target only)
//	xl-st0   host side of epStale: XL_EP_XDP_TARGET, not in xlane_devmap
//	xl-ep1   not in xlane_devmap: epNoFwd as a destination has no target
//	xl-up0   in xlane_devmap; xlane_neigh knows both gateways under
//	         neighGwMAC (the kernel's table says gwMAC: the MAC must come
//	         from the map). Extra routes on top of the tc ones:
//	           198.18.0.0/24, 2001:db8:180::/48 via .3/::3 (not in xlane_neigh)
//	           198.18.1.0/24, 2001:db8:181::/48 via .4/::4 (in xlane_neigh,
//	             but on xl-ep1)
//	           198.18.2.0/24, 2001:db8:182::/48 on xl-ep1 (not in the devmap)
//	           198.18.3.0/24 via inet6 2001:db8:100::5
//
// xdpPeer, epSmall and epJumbo are XDP targets (XL_EP_XDP_TARGET and in
// xlane_devmap); the tc harness's endpoints are not.
//
// The context is an xdp_md: the kernel takes the device and its rx queue from
// ingress_ifindex and rx_queue_index (the device must exist in the calling
// thread's netns, the queue must be one of its real rx queues), requires
// data_meta == 0 and data_end <= len(frame) (on 6.18 the bytes beyond
// data_end go to fragments: runXDPSplit), and refuses an egress_ifindex.
// Without a context the frame arrives on loopback; frames shorter than an
// Ethernet header are refused. XDP_REDIRECT is only the return code in such
// runs: bpf_redirect_map checks the devmap entry, nothing is sent.

const (
	xdpDrop     int32 = 1 // XDP_DROP
	xdpPass     int32 = 2 // XDP_PASS
	xdpRedirect int32 = 4 // XDP_REDIRECT

	devXPeer  = "xl-pe0"
	devXSmall = "xl-sm0"
	devXJumbo = "xl-jb0"
	devXNoFlg = "xl-nf0"
	devXStale = "xl-st0"

	// Fuzz inputs are cut here: beyond a page minus head- and tailroom
	// (3520 bytes) the kernel builds a multi-buffer xdp_buff, so long
	// inputs exercise fragments too.
	maxXDPFrame = 4096
)

const (
	passNoNeigh  = tcXlReasonXL_PASS_NO_NEIGH
	passNoTarget = tcXlReasonXL_PASS_NO_TARGET
	passTooBig   = tcXlReasonXL_PASS_TOO_BIG
	passToTC     = tcXlReasonXL_PASS_TO_TC
)

var (
	// xlane_neigh's MACs: all differ from the kernel's neighbour table.
	neighGwMAC     = mac("02:00:00:00:00:98") // both gateways on xl-up0
	neighOnLinkMAC = mac("02:00:00:00:00:78") // 198.51.100.78, 2001:db8:100::78
	neighV6GwMAC   = mac("02:00:00:00:00:95") // 2001:db8:100::5
	neighOtherMAC  = mac("02:00:00:00:00:79") // entries on xl-ep1

	// xdpPeer is epPeer on a real device: the peer-redirect target.
	xdpPeer = endpoint{dev: devXPeer, v4: epPeer.v4, v6: epPeer.v6, mac: epPeer.mac, hostMAC: epPeer.hostMAC}
	// epSmall has an MTU of 1280, epJumbo one of 9000.
	epSmall = endpoint{dev: devXSmall, v4: addr("10.0.2.2"), v6: addr("fd00:2::2"),
		mac: mac("02:00:00:0a:02:02"), hostMAC: mac("02:00:00:00:10:22")}
	epJumbo = endpoint{dev: devXJumbo, v4: addr("10.0.3.2"), v6: addr("fd00:3::2"),
		mac: mac("02:00:00:0a:03:02"), hostMAC: mac("02:00:00:00:10:32")}
	// epNoFlag is in xlane_devmap without XL_EP_XDP_TARGET.
	epNoFlag = endpoint{dev: devXNoFlg, v4: addr("10.0.4.2"), v6: addr("fd00:4::2"),
		mac: mac("02:00:00:0a:04:02"), hostMAC: mac("02:00:00:00:10:42")}
	// epStale has XL_EP_XDP_TARGET but its device is not in xlane_devmap.
	epStale = endpoint{dev: devXStale, v4: addr("10.0.5.2"), v6: addr("fd00:5::2"),
		mac: mac("02:00:00:0a:05:02"), hostMAC: mac("02:00:00:00:10:52")}
)

// xdpMD is struct xdp_md, the context BPF_PROG_TEST_RUN takes for XDP.
type xdpMD struct {
	Data, DataEnd, DataMeta                     uint32
	IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// xdpProg is one of the two XDP programs.
type xdpProg struct {
	name   string
	native bool
}

var (
	progNative  = xdpProg{"native", true}
	progGeneric = xdpProg{"generic", false}
	xdpProgs    = []xdpProg{progNative, progGeneric}
)

func (p xdpProg) of(o *Objects) *ebpf.Program {
	if p.native {
		return o.XDPFromEndpoint()
	}
	return o.XDPGenericFromEndpoint()
}

// ---------------------------------------------------------------------------
// Harness.

// addXDP gives h the XDP tests' devices, routes, neighbours and devmap
// entries (the topology above); buildHarness calls it for harnessCfg.xdp.
func (h *harness) addXDP(tb testing.TB) {
	tb.Helper()
	requireXDPPrograms(tb, h.objs) // compat_test.go
	nl, must := h.netlinkIn(tb)
	defer nl.Close()

	eps := []struct {
		ep     endpoint
		mtu    int
		target bool // XL_EP_XDP_TARGET
	}{{xdpPeer, 1500, true}, {epSmall, 1280, true}, {epJumbo, 9000, true},
		{epNoFlag, 1500, false}, {epStale, 1500, true}}
	for _, e := range eps {
		must("add veth "+e.ep.dev, nl.LinkAdd(&netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: e.ep.dev, HardwareAddr: e.ep.hostMAC},
			PeerName:  e.ep.dev + "p",
		}))
		link, err := nl.LinkByName(e.ep.dev)
		must("find "+e.ep.dev, err)
		must("up "+e.ep.dev, nl.LinkSetUp(link))
		h.links[e.ep.dev] = link.Attrs().Index
		val := NewEndpointVal(h.ifindexOf(e.ep), 1, e.ep.mac, e.ep.hostMAC, e.mtu, e.target)
		for _, a := range []netip.Addr{e.ep.v4, e.ep.v6} {
			// For xdpPeer this replaces epPeer's made-up ifindex.
			must("seed endpoint "+a.String(), h.objs.Endpoints().Put(KeyFromAddr(a), val))
		}
	}

	up, ep1 := h.links[devUp], h.links[devEP1]
	for _, r := range []*netlink.Route{
		{LinkIndex: up, Dst: prefix("198.18.0.0/24"), Gw: net.ParseIP("198.51.100.3")},
		{LinkIndex: up, Dst: prefix("2001:db8:180::/48"), Gw: net.ParseIP("2001:db8:100::3")},
		{LinkIndex: up, Dst: prefix("198.18.1.0/24"), Gw: net.ParseIP("198.51.100.4")},
		{LinkIndex: up, Dst: prefix("2001:db8:181::/48"), Gw: net.ParseIP("2001:db8:100::4")},
		{LinkIndex: ep1, Dst: prefix("198.18.2.0/24"), Scope: netlink.SCOPE_LINK},
		{LinkIndex: ep1, Dst: prefix("2001:db8:182::/48")},
		{LinkIndex: up, Dst: prefix("198.18.3.0/24"),
			Via: &netlink.Via{AddrFamily: netlink.FAMILY_V6, Addr: net.ParseIP("2001:db8:100::5")}},
	} {
		must("route "+r.Dst.String(), nl.RouteAdd(r))
	}

	for _, n := range []struct {
		addr    string
		ifindex int
		mac     net.HardwareAddr
	}{
		{"198.51.100.2", up, neighGwMAC},
		{"2001:db8:100::2", up, neighGwMAC},
		{"198.51.100.78", up, neighOnLinkMAC},
		{"2001:db8:100::78", up, neighOnLinkMAC},
		{"2001:db8:100::5", up, neighV6GwMAC},
		{"198.51.100.4", ep1, neighOtherMAC},
		{"2001:db8:100::4", ep1, neighOtherMAC},
		{"198.18.2.9", ep1, neighOtherMAC},
		{"2001:db8:182::9", ep1, neighOtherMAC},
	} {
		k := NeighKey{Addr: addr(n.addr).As16(), Ifindex: uint32(n.ifindex)}
		var v NeighVal
		copy(v.Mac[:], n.mac)
		must("seed neighbour "+n.addr, h.objs.Neigh().Put(k, v))
	}

	// A devmap entry holds a reference to its device, looked up in the
	// calling thread's netns.
	must("seed devmap", h.do(func() error {
		for _, dev := range []string{devXPeer, devXSmall, devXJumbo, devXNoFlg, devUp} {
			i := uint32(h.links[dev])
			if err := h.objs.Devmap().Put(i, i); err != nil {
				return fmt.Errorf("%s: %w", dev, err)
			}
		}
		return nil
	}))
}

// runXDPCtx runs prog on frame with ctx as its context (nil: none).
func (h *harness) runXDPCtx(prog *ebpf.Program, frame []byte, ctx any) (ret int32, out []byte, err error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256), Context: ctx}
	r, err := RunVerdict(h.do, prog, h.objs.Metrics(), opts)
	return int32(r), opts.DataOut, err
}

// runXDP runs prog on frame as if it arrived on ifindex, queue 0
// (0: no context, the kernel then uses loopback).
func (h *harness) runXDP(prog *ebpf.Program, frame []byte, ifindex int) (int32, []byte, error) {
	return h.runXDPSplit(prog, frame, ifindex, 0)
}

// runXDPSplit is runXDP with only the first linear bytes of frame in the
// linear area (0: as many as fit); the kernel puts the rest in fragments.
func (h *harness) runXDPSplit(prog *ebpf.Program, frame []byte, ifindex, linear int) (int32, []byte, error) {
	if ifindex == 0 && linear == 0 {
		return h.runXDPCtx(prog, frame, nil)
	}
	if linear == 0 {
		linear = len(frame)
	}
	return h.runXDPCtx(prog, frame, xdpMD{DataEnd: uint32(linear), IngressIfindex: uint32(ifindex)})
}

// xdpWant is what one program must do with a frame.
type xdpWant struct {
	want
	// ref: what a forwarded output must match apart from MACs, TTL and
	// IPv4 header checksum; nil means the input frame. The native program
	// completing a checksum is the reason for a different ref.
	ref []byte
}

type xdpCase struct {
	name            string
	dev             string // device the frame arrives on
	frame           []byte
	native, generic xdpWant
	linear          int // bytes in the linear area, the rest in fragments; 0: all that fit
}

// both is a case where the two programs must agree.
func both(name, dev string, frame []byte, w want) xdpCase {
	return xdpCase{name: name, dev: dev, frame: frame, native: xdpWant{want: w}, generic: xdpWant{want: w}}
}

// split is a case with mode-specific expectations.
func split(name, dev string, frame []byte, native, generic xdpWant) xdpCase {
	return xdpCase{name: name, dev: dev, frame: frame, native: native, generic: generic}
}

func (c xdpCase) wantFor(p xdpProg) xdpWant {
	if p.native {
		return c.native
	}
	return c.generic
}

func xdpPassed(r Reason) want { return want{ret: xdpPass, reason: r} }

func (h *harness) xdpToPeer(ep endpoint) want {
	return want{ret: xdpRedirect, reason: fwdPeer, fwd: &l2{ep.mac, ep.hostMAC}, peer: h.ifindexOf(ep)}
}

func xdpRouted(dst net.HardwareAddr) want {
	return want{ret: xdpRedirect, reason: fwdFIB, fwd: &l2{dst, upMAC}}
}

// xdpWantFromTC maps a tc expectation to XDP: pass, drop and redirect keep
// their meaning; the peer is xdpPeer; the FIB path takes the next hop's MAC
// from xlane_neigh, and a neighbour bpf_redirect_neigh would resolve is
// pass_no_neigh.
func (h *harness) xdpWantFromTC(w want) want {
	switch w.ret {
	case actShot:
		w.ret = xdpDrop
	case actPass:
		w.ret = xdpPass
	case actRedirect:
		if w.reason == fwdNeigh {
			return xdpPassed(passNoNeigh)
		}
		w.ret = xdpRedirect
		if w.peer == epPeer.ifindex {
			w.peer = h.ifindexOf(xdpPeer)
		}
		if w.fwd != nil && bytes.Equal(w.fwd.dst, gwMAC) {
			w.fwd = &l2{neighGwMAC, w.fwd.src}
		}
	}
	return w
}

func (h *harness) fromTC(cases []verdictCase) []xdpCase {
	var out []xdpCase
	for _, c := range cases {
		out = append(out, both(c.name, c.dev, c.frame, h.xdpWantFromTC(c.want)))
	}
	return out
}

func runXDPCases(t *testing.T, h *harness, cases []xdpCase) {
	t.Helper()
	for _, p := range xdpProgs {
		t.Run(p.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					h.checkXDP(t, p, h.links[tc.dev], tc.frame, tc.linear, tc.wantFor(p))
				})
			}
		})
	}
}

// checkXDP runs frame through p on ifindex and checks verdict, output and
// metrics; a TCP/UDP frame the native program forwards must carry a
// checksum that verifies.
func (h *harness) checkXDP(t *testing.T, p xdpProg, ifindex int, frame []byte, linear int, w xdpWant) {
	t.Helper()
	h.resetMetrics(t)
	ret, out, err := h.runXDPSplit(p.of(h.objs), frame, ifindex, linear)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	ref := w.ref
	if ref == nil {
		ref = frame
	}
	w.want.hook = HookXDP
	h.verify(t, ifindex, frame, ref, ret, out, w.want)
	if p.native && ret == xdpRedirect {
		if lay, ok := l4Of(out); ok && lay.summed(out) && !lay.verifies(out) {
			t.Errorf("forwarded %v checksum %#04x does not verify (complete: %#04x)",
				lay.proto, lay.field(out), lay.full(out))
		}
	}
}

// ---------------------------------------------------------------------------
// L4 checksums, computed from scratch.

// l4Layout locates the TCP/UDP checksum of an IPv4 or IPv6 (no extension
// headers) frame, using the IP length fields as the programs do.
type l4Layout struct {
	proto    layers.IPProtocol
	ipv4     bool
	l4, end  int // offsets of the L4 header and of the end of the IP packet
	csum     int // offset of the checksum field
	fragment bool
	pseudo   []byte // the pseudo header
}

func l4Of(frame []byte) (l4Layout, bool) {
	var lay l4Layout
	if len(frame) < ethHdrLen {
		return lay, false
	}
	l3 := frame[ethHdrLen:]
	switch layers.EthernetType(binary.BigEndian.Uint16(frame[12:14])) {
	case layers.EthernetTypeIPv4:
		if len(l3) < 20 || l3[0]>>4 != 4 {
			return lay, false
		}
		ihl, tot := int(l3[0]&0x0f)*4, int(binary.BigEndian.Uint16(l3[2:4]))
		if ihl < 20 || tot < ihl || tot > len(l3) {
			return lay, false
		}
		l4len := tot - ihl
		lay.ipv4 = true
		lay.proto = layers.IPProtocol(l3[9])
		lay.l4, lay.end = ethHdrLen+ihl, ethHdrLen+tot
		lay.fragment = binary.BigEndian.Uint16(l3[6:8])&0x3fff != 0
		lay.pseudo = append(bytes.Clone(l3[12:20]), 0, l3[9], byte(l4len>>8), byte(l4len))
	case layers.EthernetTypeIPv6:
		if len(l3) < 40 || l3[0]>>4 != 6 {
			return lay, false
		}
		plen := int(binary.BigEndian.Uint16(l3[4:6]))
		if 40+plen > len(l3) {
			return lay, false
		}
		lay.proto = layers.IPProtocol(l3[6])
		lay.l4, lay.end = ethHdrLen+40, ethHdrLen+40+plen
		lay.pseudo = binary.BigEndian.AppendUint32(bytes.Clone(l3[8:40]), uint32(plen))
		lay.pseudo = append(lay.pseudo, 0, 0, 0, l3[6])
	default:
		return lay, false
	}
	switch lay.proto {
	case layers.IPProtocolTCP:
		lay.csum = lay.l4 + 16
	case layers.IPProtocolUDP:
		lay.csum = lay.l4 + 6
	default:
		return lay, false
	}
	return lay, lay.csum+2 <= lay.end
}

func (lay l4Layout) field(frame []byte) uint16 {
	return binary.BigEndian.Uint16(frame[lay.csum:])
}

// summed reports whether the checksum is one the native program must make
// right: not a fragment, not an IPv4 UDP datagram without checksum.
func (lay l4Layout) summed(frame []byte) bool {
	return !lay.fragment && !(lay.ipv4 && lay.proto == layers.IPProtocolUDP && lay.field(frame) == 0)
}

// verifies reports whether the checksum in frame is correct.
func (lay l4Layout) verifies(frame []byte) bool {
	return checksum(append(bytes.Clone(lay.pseudo), frame[lay.l4:lay.end]...)) == 0
}

// full is the complete checksum of frame's L4 segment (UDP sends 0 as 0xffff).
func (lay l4Layout) full(frame []byte) uint16 {
	b := append(bytes.Clone(lay.pseudo), frame[lay.l4:lay.end]...)
	off := len(lay.pseudo) + lay.csum - lay.l4
	b[off], b[off+1] = 0, 0
	c := checksum(b)
	if c == 0 && lay.proto == layers.IPProtocolUDP {
		c = 0xffff
	}
	return c
}

// partial is what the checksum field of a CHECKSUM_PARTIAL skb holds: the
// folded, not complemented, one's complement sum of the pseudo header.
func (lay l4Layout) partial() uint16 { return ^checksum(lay.pseudo) }

func mustL4(tb testing.TB, frame []byte) l4Layout {
	tb.Helper()
	lay, ok := l4Of(frame)
	if !ok {
		tb.Fatalf("no TCP/UDP checksum in % x", frame)
	}
	return lay
}

// withCsum returns a copy of frame with its L4 checksum field set to v.
func withCsum(tb testing.TB, frame []byte, v uint16) []byte {
	tb.Helper()
	lay := mustL4(tb, frame)
	return edit(frame, func(b []byte) { binary.BigEndian.PutUint16(b[lay.csum:], v) })
}

// ipv6ExtHdr inserts an 8-byte extension header of type nh (0: hop-by-hop
// with a PadN option, 44: an atomic fragment header) after the IPv6 header.
func ipv6ExtHdr(frame []byte, nh byte) []byte {
	const l4 = ethHdrLen + 40
	ext := []byte{frame[ethHdrLen+6], 0, 1, 4, 0, 0, 0, 0}
	if nh == 44 {
		ext = []byte{frame[ethHdrLen+6], 0, 0, 0, 0, 0, 0x12, 0x34}
	}
	b := slices.Concat(frame[:l4], ext, frame[l4:])
	b[ethHdrLen+6] = nh
	binary.BigEndian.PutUint16(b[ethHdrLen+4:], binary.BigEndian.Uint16(frame[ethHdrLen+4:])+8)
	return b
}

// fixIPv4 recomputes the IPv4 header checksum of frame in place.
func fixIPv4(b []byte) {
	hdr := b[ethHdrLen : ethHdrLen+int(b[ethHdrLen]&0x0f)*4]
	binary.BigEndian.PutUint16(hdr[10:], ipv4HeaderChecksum(hdr))
}

// pattern is n payload bytes that are not all zeros: zeros add nothing to
// a checksum and would hide bytes left out of the sum.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*151 + 89)
	}
	return b
}

// sized is s's frame with a pattern payload that makes it n bytes long.
func sized(tb testing.TB, s pktSpec, n int) []byte {
	tb.Helper()
	// Measured with a payload: gopacket pads shorter frames to 60 bytes.
	s.payload = pattern(64)
	hdrs := len(s.frame(tb)) - 64
	if n < hdrs+64 {
		tb.Fatalf("sized: %d bytes is too short", n)
	}
	s.payload = pattern(n - hdrs)
	frame := s.frame(tb)
	if len(frame) != n {
		tb.Fatalf("sized: built %d bytes, not %d", len(frame), n)
	}
	return frame
}

// ---------------------------------------------------------------------------
// Tables.

// checksumCases covers l4csum.h: every frame goes from epSrc to a local
// endpoint, first with a correct checksum, then with the pseudo-header sum a
// CHECKSUM_PARTIAL skb carries. The native program must leave the first
// alone and complete the second; the generic one must touch neither.
func (h *harness) checksumCases(tb testing.TB) []xdpCase {
	peer := h.xdpToPeer(xdpPeer)
	var cases []xdpCase
	// addSplit adds a case for a correct frame and one for its partial
	// twin, with linear bytes in the linear area.
	addSplit := func(name string, complete []byte, linear int, w want) {
		lay := mustL4(tb, complete)
		if !lay.verifies(complete) {
			tb.Fatalf("%s: test frame's checksum does not verify", name)
		}
		partial := withCsum(tb, complete, lay.partial())
		c := both(name+"/complete", devEP0, complete, w)
		p := split(name+"/partial", devEP0, partial, xdpWant{w, complete}, xdpWant{want: w})
		c.linear, p.linear = linear, linear
		cases = append(cases, c, p)
	}
	add := func(name string, complete []byte, w want) { addSplit(name, complete, 0, w) }

	fams := []struct {
		name     string
		src, dst netip.Addr
	}{{"ipv4", epSrc.v4, xdpPeer.v4}, {"ipv6", epSrc.v6, xdpPeer.v6}}
	protos := []struct {
		name  string
		proto layers.IPProtocol
	}{{"tcp", layers.IPProtocolTCP}, {"udp", layers.IPProtocolUDP}}
	for _, fam := range fams {
		for _, pr := range protos {
			s := pktSpec{src: fam.src, dst: fam.dst, proto: pr.proto}
			name := fam.name + "/" + pr.name
			add(name+"/default payload", s.frame(tb), peer)
			// 256-byte chunks, and a zero-padded tail of every parity.
			for _, n := range []int{0, 1, 2, 3, 255, 256, 257, 1399} {
				s.payload = pattern(n)
				add(fmt.Sprintf("%s/payload %d", name, n), s.frame(tb), peer)
			}
			// Multi-buffer frame: the L4 bytes span fragments.
			s.payload = nil
			jumbo := pktSpec{src: fam.src, dst: epJumbo.v4, proto: pr.proto}
			if fam.src.Is6() {
				jumbo.dst = epJumbo.v6
			}
			add(name+"/jumbo 9014 bytes", sized(tb, jumbo, 9014), h.xdpToPeer(epJumbo))
			// L4 bytes straddling the linear area and a fragment, split
			// inside a 16-bit word; the checksum field is in the fragment.
			s.payload = pattern(257)
			f := s.frame(tb)
			addSplit(name+"/payload 257/fragment after 1 L4 byte", f, mustL4(tb, f).l4+1, peer)

			// Any checksum that does not verify is replaced.
			c := s.frame(tb)
			garbage := withCsum(tb, c, mustL4(tb, c).full(c)^0x1234)
			cases = append(cases, split(name+"/wrong checksum", devEP0, garbage,
				xdpWant{peer, c}, xdpWant{want: peer}))

			// A complete checksum of 0 is sent as 0xffff by UDP.
			zero := s
			zero.payload = pattern(40)
			z := zero.frame(tb)
			lay := mustL4(tb, z)
			binary.BigEndian.PutUint16(z[lay.end-2:], 0)
			binary.BigEndian.PutUint16(z[lay.end-2:], lay.full(z)) // now sums to 0xffff
			binary.BigEndian.PutUint16(z[lay.csum:], 0)
			if pr.proto == layers.IPProtocolUDP {
				binary.BigEndian.PutUint16(z[lay.csum:], 0xffff)
			}
			add(name+"/checksum of zero", z, peer)
		}
		// Trailer bytes after the IP packet are not part of the sum.
		trailer := pktSpec{src: fam.src, dst: fam.dst, proto: layers.IPProtocolUDP, pad: 9}.frame(tb)
		for i := len(trailer) - 9; i < len(trailer); i++ {
			trailer[i] = 0xa5
		}
		add(fam.name+"/udp/ethernet trailer", trailer, peer)
	}
	v4opt := pktSpec{src: epSrc.v4, dst: xdpPeer.v4, ipOpt: true}.frame(tb)
	add("ipv4/tcp/ip options", v4opt, peer)

	// (d) IPv4 UDP without a checksum: left alone.
	udp4 := pktSpec{src: epSrc.v4, dst: xdpPeer.v4, proto: layers.IPProtocolUDP}.frame(tb)
	cases = append(cases, both("ipv4/udp/checksum 0 (none)", devEP0, withCsum(tb, udp4, 0), peer))
	// IPv6 UDP must have one: 0 is just a wrong checksum.
	udp6 := pktSpec{src: epSrc.v6, dst: xdpPeer.v6, proto: layers.IPProtocolUDP}.frame(tb)
	cases = append(cases, split("ipv6/udp/checksum 0", devEP0, withCsum(tb, udp6, 0),
		xdpWant{peer, udp6}, xdpWant{want: peer}))

	// Fragments are never CHECKSUM_PARTIAL: not summed, redirected as they are.
	tcp := pktSpec{src: epSrc.v4, dst: xdpPeer.v4}.frame(tb)
	first := edit(withCsum(tb, tcp, 0x1234), func(b []byte) {
		binary.BigEndian.PutUint16(b[ethHdrLen+6:], 0x2000) // MF
		fixIPv4(b)
	})
	later := edit(withCsum(tb, udp4, 0x1234), func(b []byte) {
		binary.BigEndian.PutUint16(b[ethHdrLen+6:], 185) // offset 1480
		fixIPv4(b)
	})
	cases = append(cases,
		both("ipv4/tcp/first fragment", devEP0, first, peer),
		both("ipv4/udp/later fragment", devEP0, later, peer))

	// Layouts l4csum.h does not sum: native XDP leaves them to Linux
	// (pass_no_target, frame unchanged); generic XDP redirects them.
	tcp6 := pktSpec{src: epSrc.v6, dst: xdpPeer.v6}.frame(tb)
	short := edit(tcp[:ethHdrLen+20+17], func(b []byte) {
		binary.BigEndian.PutUint16(b[ethHdrLen+2:], 20+17) // TCP cut before its checksum
		fixIPv4(b)
	})
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"ipv6/tcp/hop-by-hop header", ipv6ExtHdr(tcp6, 0)},
		{"ipv6/tcp/fragment header", ipv6ExtHdr(tcp6, 44)},
		{"ipv6/sctp", edit(tcp6, func(b []byte) { b[ethHdrLen+6] = 132 })},
	} {
		cases = append(cases, split(c.name, devEP0, c.frame,
			xdpWant{want: xdpPassed(passNoTarget)}, xdpWant{want: peer}))
	}
	// A segment shorter than its TCP header is malformed (issue 12 item
	// 11), in both programs.
	cases = append(cases, both("ipv4/tcp/segment shorter than its header", devEP0, short,
		xdpPassed(passToTC)))
	routed6 := pktSpec{src: epSrc.v6, dst: addr("2001:db8:203::9"), proto: layers.IPProtocolUDP}.frame(tb)
	cases = append(cases, split("ipv6/udp/fragment header via gateway", devEP0, ipv6ExtHdr(routed6, 44),
		xdpWant{want: xdpPassed(passNoTarget)}, xdpWant{want: xdpRouted(neighGwMAC)}))

	// The FIB path completes checksums too.
	routed := pktSpec{src: epSrc.v4, dst: addr("203.0.113.9"), proto: layers.IPProtocolUDP}.frame(tb)
	add("ipv4/udp/via gateway", routed, xdpRouted(neighGwMAC))
	return cases
}

// noTargetCases are destinations XDP may not redirect to: native XDP
// needs XL_EP_XDP_TARGET on a local endpoint, generic XDP and the FIB path
// need the device in xlane_devmap. Either way the frame goes to Linux
// unchanged, with pass_no_target.
func (h *harness) noTargetCases(tb testing.TB) []xdpCase {
	w := xdpPassed(passNoTarget)
	onlyGeneric := func(name string, frame []byte) xdpCase {
		return split(name, devEP0, frame, xdpWant{want: w}, xdpWant{want: h.xdpToPeer(epNoFlag)})
	}
	return []xdpCase{
		both("ipv4/endpoint on a device not in xlane_devmap", devEP0, tcp4(tb, epNoFwd.v4), w),
		both("ipv6/endpoint on a device not in xlane_devmap", devEP0, tcp6(tb, epNoFwd.v6), w),
		both("ipv4/icmp/endpoint on a device not in xlane_devmap", devEP0,
			pktSpec{src: epSrc.v4, dst: epNoFwd.v4, proto: layers.IPProtocolICMPv4}.frame(tb), w),
		both("ipv4/endpoint without a device", devEP0, tcp4(tb, epOther.v4), w),
		both("ipv6/endpoint without a device", devEP0, tcp6(tb, epOther.v6), w),
		onlyGeneric("ipv4/endpoint in xlane_devmap without xdp-target flag", tcp4(tb, epNoFlag.v4)),
		onlyGeneric("ipv6/endpoint in xlane_devmap without xdp-target flag", tcp6(tb, epNoFlag.v6)),
		// The kernel has no neighbour for this gateway: Linux resolves
		// first (pass_no_neigh), before the devmap is asked.
		both("ipv4/gateway on a device not in xlane_devmap", devEP0, tcp4(tb, addr("198.18.2.9")), xdpPassed(passNoNeigh)),
		both("ipv6/gateway on a device not in xlane_devmap", devEP0, tcp6(tb, addr("2001:db8:182::9")), xdpPassed(passNoNeigh)),
	}
}

// staleTargetCases: an endpoint flagged XL_EP_XDP_TARGET whose device is
// missing from xlane_devmap (the daemon's two writes are not atomic).
func (h *harness) staleTargetCases(tb testing.TB) []xdpCase {
	w := xdpPassed(passNoTarget)
	return []xdpCase{
		both("ipv4/xdp-target endpoint not in xlane_devmap", devEP0, tcp4(tb, epStale.v4), w),
		both("ipv6/xdp-target endpoint not in xlane_devmap", devEP0, tcp6(tb, epStale.v6), w),
	}
}

func (h *harness) tooBigCases(tb testing.TB) []xdpCase {
	big := xdpPassed(passTooBig)
	var cases []xdpCase
	for _, fam := range []struct {
		name string
		src  netip.Addr
		gw   netip.Addr
	}{{"ipv4", epSrc.v4, addr("203.0.113.9")}, {"ipv6", epSrc.v6, addr("2001:db8:203::9")}} {
		pick := func(ep endpoint) netip.Addr {
			if fam.src.Is4() {
				return ep.v4
			}
			return ep.v6
		}
		for _, c := range []struct {
			name string
			dst  netip.Addr
			size int
			w    want
		}{
			{"mtu 1280 endpoint/1294-byte frame", pick(epSmall), 1294, h.xdpToPeer(epSmall)},
			{"mtu 1280 endpoint/1295-byte frame", pick(epSmall), 1295, big},
			{"mtu 1280 endpoint/1514-byte frame", pick(epSmall), 1514, big},
			{"mtu 1500 endpoint/1514-byte frame", pick(xdpPeer), 1514, h.xdpToPeer(xdpPeer)},
			{"mtu 1500 endpoint/1515-byte frame", pick(xdpPeer), 1515, big},
			{"mtu 9000 endpoint/9015-byte frame", pick(epJumbo), 9015, big},
			{"uplink mtu 1500/1514-byte frame", fam.gw, 1514, xdpRouted(neighGwMAC)},
			{"uplink mtu 1500/1515-byte frame", fam.gw, 1515, big},
		} {
			frame := sized(tb, pktSpec{src: fam.src, dst: c.dst}, c.size)
			cases = append(cases, both(fam.name+"/"+c.name, devEP0, frame, c.w))
		}
	}
	return cases
}

func (h *harness) xdpFIBCases(tb testing.TB) []xdpCase {
	cases := h.fromTC(fibCases(tb))
	noNeigh := xdpPassed(passNoNeigh)
	return append(cases,
		// The FIB lookup does not skip the kernel's neighbours (it must, to
		// get the egress MAC): a next hop the kernel has not resolved goes
		// to Linux even if xlane_neigh knows it.
		both("ipv4/on-link neighbour only in xlane_neigh", devEP0, tcp4(tb, addr("198.51.100.78")), noNeigh),
		both("ipv6/on-link neighbour only in xlane_neigh", devEP0, tcp6(tb, addr("2001:db8:100::78")), noNeigh),
		both("ipv4/gateway not in xlane_neigh", devEP0, tcp4(tb, addr("198.18.0.9")), noNeigh),
		both("ipv6/gateway not in xlane_neigh", devEP0, tcp6(tb, addr("2001:db8:180::9")), noNeigh),
		both("ipv4/gateway in xlane_neigh on another device", devEP0, tcp4(tb, addr("198.18.1.9")), noNeigh),
		both("ipv6/gateway in xlane_neigh on another device", devEP0, tcp6(tb, addr("2001:db8:181::9")), noNeigh),
		both("ipv4/via an ipv6 gateway, unresolved in the kernel", devEP0, tcp4(tb, addr("198.18.3.9")), noNeigh),
		both("ipv4/icmp via gateway", devEP0, pktSpec{src: epSrc.v4, dst: addr("203.0.113.9"),
			proto: layers.IPProtocolICMPv4}.frame(tb), xdpRouted(neighGwMAC)),
		both("ipv6/udp via gateway", devEP0, pktSpec{src: epSrc.v6, dst: addr("2001:db8:203::9"),
			proto: layers.IPProtocolUDP}.frame(tb), xdpRouted(neighGwMAC)),
	)
}

func TestXDPPeerRedirect(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.fromTC(peerRedirectCases(t)))
}

func TestXDPSpoofing(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.fromTC(spoofCases(t)))
}

func TestXDPLinkScope(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.fromTC(linkScopeCases(t)))
}

func TestXDPTTL(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.fromTC(ttlCases(t)))
}

func TestXDPNonIP(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.fromTC(nonIPCases(t)))
}

// TestXDPMalformed includes the frames cut inside the IP header, which
// BPF_PROG_TEST_RUN refuses for tc but runs for XDP.
func TestXDPMalformed(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.fromTC(slices.Concat(malformedCases(t), truncatedCases(t))))
	// A malformed transport header goes to the tc program, which drops
	// and counts it; a first fragment with its whole header is forwarded.
	// Native XDP hands IPv6 extension headers to Linux: it completes no
	// checksum behind them (lib/l4csum.h).
	var l4 []xdpCase
	for _, c := range h.fromTC(l4MalformedCases(t)) {
		if c.native.ret == xdpDrop {
			c.native, c.generic = xdpWant{want: xdpPassed(passToTC)}, xdpWant{want: xdpPassed(passToTC)}
		} else if c.frame[ethHdrLen+6] == extHopByHop && c.frame[12] == 0x86 {
			c.native = xdpWant{want: xdpPassed(passNoTarget)}
		}
		l4 = append(l4, c)
	}
	runXDPCases(t, h, l4)
}

// TestXDPFIB: as of this writing the forwarded cases fail with source MAC
// 00:00:00:00:00:00: with BPF_FIB_LOOKUP_SKIP_NEIGH the kernel fills
// neither dmac nor smac (uapi bpf.h), and to_fib copies fib.smac.
func TestXDPFIB(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.xdpFIBCases(t))
}

func TestXDPNoTarget(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.noTargetCases(t))
}

// TestXDPStaleTarget: the frame must reach Linux unchanged (maps.h:
// devmap_has), even when the xdp-target flag and the devmap disagree.
// Fails as of this writing: native XDP checks only the flag, rewrites MACs
// and TTL, then bpf_redirect_map falls back to XDP_PASS with that frame.
func TestXDPStaleTarget(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.staleTargetCases(t))
}

func TestXDPTooBig(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.tooBigCases(t))
}

func TestXDPChecksum(t *testing.T) {
	h := newXDPHarness(t)
	runXDPCases(t, h, h.checksumCases(t))
}

// TestXDPChecksumEveryLength sends TCP and UDP segments of every length up
// to two 256-byte chunks plus a tail, with a complete and with a partial
// checksum, through the native program: each must leave with the complete
// checksum. Failures are summarised as L4 lengths. As of this writing L4
// lengths of 253-255 mod 256 fail: xdp_sum masks the padded tail length
// with 255, so a 253-255-byte tail pads to 256, becomes 0, and is left out.
func TestXDPChecksumEveryLength(t *testing.T) {
	h := newXDPHarness(t)
	prog := progNative.of(h.objs)
	ifindex := h.links[devEP0]
	for _, fam := range []struct {
		name     string
		src, dst netip.Addr
	}{{"ipv4", epSrc.v4, xdpPeer.v4}, {"ipv6", epSrc.v6, xdpPeer.v6}} {
		for _, proto := range []layers.IPProtocol{layers.IPProtocolTCP, layers.IPProtocolUDP} {
			t.Run(fam.name+"/"+strings.ToLower(proto.String()), func(t *testing.T) {
				bad := map[string][]int{}
				for n := range 600 {
					complete := pktSpec{src: fam.src, dst: fam.dst, proto: proto, payload: pattern(n)}.frame(t)
					lay := mustL4(t, complete)
					want := lay.field(complete)
					for _, in := range []struct {
						name  string
						frame []byte
					}{{"complete", complete}, {"partial", withCsum(t, complete, lay.partial())}} {
						ret, out, err := h.runXDP(prog, in.frame, ifindex)
						if err != nil {
							t.Fatalf("payload %d: run: %v", n, err)
						}
						if ret != xdpRedirect {
							t.Fatalf("payload %d, %s: return value %d", n, in.name, ret)
						}
						if got := lay.field(out); got != want {
							bad[in.name] = append(bad[in.name], lay.end-lay.l4)
						}
					}
				}
				for _, name := range slices.Sorted(maps.Keys(bad)) {
					t.Errorf("%s checksum wrong after the native program for L4 lengths %s",
						name, formatRanges(bad[name]))
				}
			})
		}
	}
}

// formatRanges prints sorted ints as "1-3, 7 (mod 256: ...)".
func formatRanges(ns []int) string {
	var parts []string
	mods := map[int]bool{}
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, fmt.Sprint(ns[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		}
		for _, n := range ns[i : j+1] {
			mods[n%256] = true
		}
		i = j + 1
	}
	return fmt.Sprintf("%s (mod 256: %v)", strings.Join(parts, ", "), slices.Sorted(maps.Keys(mods)))
}

// TestXDPContext pins down how BPF_PROG_TEST_RUN treats an xdp_md context:
// ctx->ingress_ifindex is the context's device (loopback without one), and
// the kernel refuses contexts and frames it cannot run before the program
// sees them, counting nothing.
func TestXDPContext(t *testing.T) {
	h := newXDPHarness(t)
	arp := nonIPCases(t)[0].frame
	md := func(ifindex, queue int) xdpMD {
		return xdpMD{DataEnd: uint32(len(arp)), IngressIfindex: uint32(ifindex), RxQueueIndex: uint32(queue)}
	}
	for _, p := range xdpProgs {
		t.Run(p.name, func(t *testing.T) {
			for _, tc := range []struct {
				name    string
				ctx     any
				wantDev string
			}{
				{"no context", nil, devLo},
				{"zero context", xdpMD{DataEnd: uint32(len(arp))}, devLo},
				// data_end short of the frame is not an error: the
				// kernel puts the rest in a fragment.
				{"frame beyond data_end", xdpMD{DataEnd: uint32(len(arp)) - 1, IngressIfindex: uint32(h.links[devEP0])}, devEP0},
				{"loopback", md(1, 0), devLo},
				{devEP0, md(h.links[devEP0], 0), devEP0},
				{devXPeer, md(h.links[devXPeer], 0), devXPeer},
				{devUp, md(h.links[devUp], 0), devUp},
			} {
				t.Run(tc.name, func(t *testing.T) {
					h.resetMetrics(t)
					ret, out, err := h.runXDPCtx(p.of(h.objs), arp, tc.ctx)
					if err != nil {
						t.Fatal(err)
					}
					if ret != xdpPass || !bytes.Equal(out, arp) {
						t.Errorf("return value %d, frame changed %v", ret, !bytes.Equal(out, arp))
					}
					want := map[MetricsKey]MetricsVal{
						metricsKeyAt(HookXDP, h.links[tc.wantDev], passNonIP, DirEgress): {Packets: 1, Bytes: uint64(len(arp))},
					}
					if got := h.metrics(t); !maps.Equal(got, want) {
						t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(want))
					}
				})
			}

			ep0 := h.links[devEP0]
			for _, tc := range []struct {
				name  string
				frame []byte
				ctx   any
				want  error
			}{
				{"unknown ifindex", arp, md(9999, 0), unix.ENODEV},
				{"rx queue beyond the device's", arp, md(ep0, 4096), unix.EINVAL},
				{"rx queue without ifindex", arp, md(0, 1), unix.EINVAL},
				{"egress ifindex set", arp, xdpMD{DataEnd: uint32(len(arp)), IngressIfindex: uint32(ep0), EgressIfindex: uint32(ep0)}, unix.EINVAL},
				{"data_end beyond the frame", arp, xdpMD{DataEnd: uint32(len(arp)) + 1, IngressIfindex: uint32(ep0)}, unix.EINVAL},
				{"data_meta set", arp, xdpMD{DataEnd: uint32(len(arp)), DataMeta: 4, IngressIfindex: uint32(ep0)}, unix.EINVAL},
				{"13-byte frame", arp[:13], xdpMD{DataEnd: 13, IngressIfindex: uint32(ep0)}, unix.EINVAL},
				{"13-byte frame, no context", arp[:13], nil, unix.EINVAL},
				{"empty frame", nil, nil, unix.EINVAL},
			} {
				t.Run(tc.name, func(t *testing.T) {
					h.resetMetrics(t)
					if _, _, err := h.runXDPCtx(p.of(h.objs), tc.frame, tc.ctx); !errors.Is(err, tc.want) {
						t.Errorf("run: %v, want %v", err, tc.want)
					}
					if got := h.metrics(t); len(got) != 0 {
						t.Errorf("metrics counted: %s", formatMetrics(got))
					}
				})
			}
		})
	}
}

// xdpFrames are the XDP table frames, the seed corpus of the fuzz test.
func (h *harness) xdpFrames(tb testing.TB) [][]byte {
	frames := allFrames(tb)
	for _, cases := range [][]xdpCase{
		h.checksumCases(tb), h.noTargetCases(tb), h.staleTargetCases(tb), h.tooBigCases(tb), h.xdpFIBCases(tb),
	} {
		for _, c := range cases {
			if len(c.frame) <= maxXDPFrame {
				frames = append(frames, c.frame)
			}
		}
	}
	return frames
}

// FuzzXDPFromEndpoint feeds arbitrary frames arriving on xl-ep0 to both
// programs. The kernel may refuse only frames shorter than an Ethernet
// header. Otherwise the return value must match the single reason counted
// egress (with one packet of the frame's length, plus the receiving side for
// fwd_peer); a frame that is not redirected must leave unchanged, and a
// redirected one may differ only in MACs, TTL, IPv4 header checksum and,
// from the native program, a TCP/UDP checksum that must then verify.
func FuzzXDPFromEndpoint(f *testing.F) {
	h := newXDPHarness(f)
	for _, frame := range h.xdpFrames(f) {
		f.Add(frame)
	}
	f.Add([]byte{})
	ifindex := h.links[devEP0]
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) > maxXDPFrame {
			frame = frame[:maxXDPFrame]
		}
		for _, p := range xdpProgs {
			h.resetMetrics(t)
			ret, out, err := h.runXDP(p.of(h.objs), frame, ifindex)
			m := h.metrics(t)
			if err != nil {
				if len(frame) >= ethHdrLen || !errors.Is(err, unix.EINVAL) {
					t.Fatalf("%s: run: %v", p.name, err)
				}
				if len(m) != 0 {
					t.Fatalf("%s: refused frame counted: %s", p.name, formatMetrics(m))
				}
				continue
			}
			checkXDPFuzzRun(t, p, ifindex, frame, ret, out, m)
		}
	})
}

func checkXDPFuzzRun(t *testing.T, p xdpProg, ifindex int, frame []byte, ret int32, out []byte, m map[MetricsKey]MetricsVal) {
	t.Helper()
	reason := fuzzReason(t, p.name+": ", ifindex, frame, m) // tc_test.go

	var wantRet int32
	switch {
	case reason.IsDrop():
		wantRet = xdpDrop
	case reason == fwdPeer || reason == fwdFIB:
		wantRet = xdpRedirect
	case reason == fwdNeigh:
		t.Fatalf("%s: XDP counted %s", p.name, reason)
	default:
		wantRet = xdpPass
	}
	if ret != wantRet {
		t.Fatalf("%s: return value %d with reason %s, want %d", p.name, ret, reason, wantRet)
	}
	if len(out) != len(frame) {
		t.Fatalf("%s: output is %d bytes, input %d", p.name, len(out), len(frame))
	}
	if ret != xdpRedirect {
		if !bytes.Equal(out, frame) {
			t.Fatalf("%s: frame changed with verdict %s: %s", p.name, reason, frameDiff(out, frame))
		}
		return
	}

	// Redirected: the parser accepted an IPv4 or IPv6 header.
	l3 := ethHdrLen
	changeable := map[int]bool{}
	for i := range 12 {
		changeable[i] = true
	}
	ttl := l3 + 7
	ipv4 := binary.BigEndian.Uint16(frame[12:14]) == uint16(layers.EthernetTypeIPv4)
	if ipv4 {
		ttl = l3 + 8
		changeable[l3+10], changeable[l3+11] = true, true
		hdrIn := frame[l3 : l3+int(frame[l3]&0x0f)*4]
		hdrOut := out[l3 : l3+len(hdrIn)]
		if checksum(hdrIn) == 0 && checksum(hdrOut) != 0 {
			t.Errorf("%s: IPv4 header checksum %#04x, recomputed %#04x", p.name,
				binary.BigEndian.Uint16(hdrOut[10:]), ipv4HeaderChecksum(hdrOut))
		}
	}
	changeable[ttl] = true
	if out[ttl] != frame[ttl]-1 {
		t.Errorf("%s: TTL/hop limit %d, want %d", p.name, out[ttl], frame[ttl]-1)
	}
	if lay, ok := l4Of(frame); ok && p.native && lay.summed(frame) {
		changeable[lay.csum], changeable[lay.csum+1] = true, true
		if !lay.verifies(out) {
			t.Errorf("%s: %v checksum %#04x does not verify (complete: %#04x)",
				p.name, lay.proto, lay.field(out), lay.full(out))
		}
		if lay.verifies(frame) && lay.field(out) != lay.field(frame) {
			t.Errorf("%s: verified checksum %#04x replaced by %#04x", p.name, lay.field(frame), lay.field(out))
		}
	}
	for i := range frame {
		if !changeable[i] && out[i] != frame[i] {
			t.Errorf("%s: byte %d changed: %#02x -> %#02x", p.name, i, frame[i], out[i])
		}
	}
}

// BenchmarkXDPFromEndpoint measures native peer redirect of a 1514-byte
// frame (a 1500-byte IPv4 TCP packet) whose checksum the program must
// complete, against the same frame with its checksum already complete and
// against the generic program, which sums nothing. Loopback is the sending
// device (prog.Benchmark passes no context).
//
// The kernel reruns a batch on the same buffer: the first run completes the
// checksum, so the others would find it complete, and each run lowers the
// TTL. The per-run variants therefore make one BPF_PROG_TEST_RUN call per
// run (a fresh copy of the frame each time) and add up the kernel's timing
// of each, which includes reading the clock once; the batched variants run
// 250 times per call (TTL 255) for the figures without that overhead.
func BenchmarkXDPFromEndpoint(b *testing.B) {
	h := newXDPHarness(b)
	complete := sized(b, pktSpec{src: epLo.v4, dst: xdpPeer.v4, ttl: 255}, 1514)
	lay := mustL4(b, complete)
	partial := withCsum(b, complete, lay.partial())

	// The partial frame must really leave complete, the other unchanged.
	for _, in := range [][]byte{partial, complete} {
		ret, out, err := h.runXDP(progNative.of(h.objs), in, 0)
		if err != nil || ret != xdpRedirect {
			b.Fatalf("run: return value %d, %v", ret, err)
		}
		if got, want := lay.field(out), lay.field(complete); got != want {
			b.Fatalf("checksum %#04x, want %#04x", got, want)
		}
	}

	for _, bc := range []struct {
		name  string
		p     xdpProg
		frame []byte
		batch int
	}{
		{"native/checksum partial", progNative, partial, 1},
		{"native/checksum complete", progNative, complete, 1},
		{"generic", progGeneric, complete, 1},
		{"native/checksum complete/batched", progNative, complete, 250},
		{"generic/batched", progGeneric, complete, 250},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchBatched(b, h, bc.p.of(h.objs), bc.frame, bc.batch, xdpRedirect) // tc_test.go
		})
	}
}
