package bpf

import (
	"bytes"
	"encoding/binary"
	"maps"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
)

// Cross-node traffic (bpf/lib/overlay.h): the endpoint program tunnels a
// packet for a peer node's pod through the VXLAN device, drops one for a
// cluster address no node owns, and the overlay's receive program refuses
// a packet without a known VNI.
//
//	xl-ep0 (epSrc, network 1, VNI 4242) --> 10.244.2.0/24, fd00:244:2::/64: node 7 at 192.0.2.7 / 2001:db8::7
//	                                    --> 10.244.3.0/24: node 8, found down (drop_peer_down)
//	                                    --> fd00:244:3::/64: node 8 natively routed, found down (drop_peer_down)
//	                                    --> 10.244.7.0/24, fd00:244:7::/64: node 9, no WireGuard session, strict (drop_unencrypted)
//	                                    --> 10.244.0.0/16, fd00:244::/32 otherwise: nobody's (drop_no_peer)

var (
	overlayMAC    = mac("02:78:6c:76:78:00")
	overlaySrcMAC = mac("02:78:6c:76:78:01")
)

func seedOverlay(t *testing.T, h *harness, overlayIfindex int) {
	t.Helper()
	put := func(p string, v PeerVal) {
		pp := netip.MustParsePrefix(p)
		k := PeerKey{Prefixlen: uint32(pp.Bits()), Addr: pp.Addr().As16()}
		if pp.Addr().Is4() {
			k.Prefixlen += 96
		}
		if err := h.objs.Peers().Put(&k, &v); err != nil {
			t.Fatal(err)
		}
	}
	put("10.244.0.0/16", PeerVal{Flags: PeerFlagGone})
	put("fd00:244::/32", PeerVal{Flags: PeerFlagGone})
	put("10.244.2.0/24", PeerVal{Underlay: addr("192.0.2.7").As16(), NodeId: 7})
	put("fd00:244:2::/64", PeerVal{Underlay: addr("2001:db8::7").As16(), NodeId: 7, Flags: PeerFlagV6})
	put("10.244.3.0/24", PeerVal{Underlay: addr("192.0.2.8").As16(), NodeId: 8, Flags: PeerFlagDown})
	put("fd00:244:3::/64", PeerVal{Underlay: addr("2001:db8::8").As16(), NodeId: 8, Flags: PeerFlagV6 | PeerFlagNative | PeerFlagDown})
	put("10.244.7.0/24", PeerVal{Underlay: addr("10.244.7.0").As16(), NodeId: 9, Flags: PeerFlagUnencrypted})
	put("fd00:244:7::/64", PeerVal{Underlay: addr("10.244.7.0").As16(), NodeId: 9, Flags: PeerFlagUnencrypted})
	net, vni := uint32(1), uint32(4242)
	if err := h.objs.NetVNI().Put(&net, &vni); err != nil {
		t.Fatal(err)
	}
	if err := h.objs.VNINet().Put(&vni, &net); err != nil {
		t.Fatal(err)
	}
	zero := uint32(0)
	if err := h.objs.Overlay().Put(&zero, &OverlayCfg{Ifindex: uint32(overlayIfindex)}); err != nil {
		t.Fatal(err)
	}
}

func TestOverlay(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	seedOverlay(t, h, h.links[devUp])
	fwdOverlay := want{ret: actRedirect, reason: tcXlReasonXL_FWD_OVERLAY, fwd: &l2{overlayMAC, overlaySrcMAC}}
	for _, tc := range []verdictCase{
		{"peer pod v4", devEP0, tcp4(t, addr("10.244.2.5")), fwdOverlay},
		{"peer pod v6", devEP0, tcp6(t, addr("fd00:244:2::5")), fwdOverlay},
		{"no node v4", devEP0, tcp4(t, addr("10.244.9.9")), dropped(tcXlReasonXL_DROP_NO_PEER)},
		{"no node v6", devEP0, tcp6(t, addr("fd00:244:9::9")), dropped(tcXlReasonXL_DROP_NO_PEER)},
		// A peer the daemon's probe found down: counted, not sent.
		{"peer down", devEP0, tcp4(t, addr("10.244.3.5")), dropped(tcXlReasonXL_DROP_PEER_DOWN)},
		{"native peer down", devEP0, tcp6(t, addr("fd00:244:3::5")), dropped(tcXlReasonXL_DROP_PEER_DOWN)},
		// --encryption-strict, no WireGuard session with the peer:
		// counted, never sent (in cleartext or at all).
		{"unencrypted v4", devEP0, tcp4(t, addr("10.244.7.5")), dropped(tcXlReasonXL_DROP_UNENCRYPTED)},
		{"unencrypted v6", devEP0, tcp6(t, addr("fd00:244:7::5")), dropped(tcXlReasonXL_DROP_UNENCRYPTED)},
		// Bigger than the overlay device's MTU (xl-up0's 1500 here):
		// Linux sends the ICMP error.
		{"too big v4", devEP0, pktSpec{src: epSrc.v4, dst: addr("10.244.2.5"), payload: make([]byte, 1500)}.frame(t), passed(tcXlReasonXL_PASS_TOO_BIG)},
		{"too big v6", devEP0, pktSpec{src: epSrc.v6, dst: addr("fd00:244:2::5"), payload: make([]byte, 1500)}.frame(t), passed(tcXlReasonXL_PASS_TOO_BIG)},
	} {
		t.Run(tc.name, func(t *testing.T) { h.check(t, h.links[tc.dev], tc.frame, tc.want) })
	}
	// Without the overlay device the peer's traffic is a counted drop,
	// never a leak through the FIB.
	zero := uint32(0)
	if err := h.objs.Overlay().Put(&zero, &OverlayCfg{}); err != nil {
		t.Fatal(err)
	}
	t.Run("no device", func(t *testing.T) {
		h.check(t, h.links[devEP0], tcp4(t, addr("10.244.2.5")), dropped(tcXlReasonXL_DROP_NO_PEER))
	})
}

// TestOverlayAlone: the programs of a node alone (loaded without
// Options.Cluster) never consult xlane_peers, whatever it holds: a peer
// pod's address is routed by the FIB like any other.
func TestOverlayAlone(t *testing.T) {
	h := newHarness(t)
	seedOverlay(t, h, h.links[devUp])
	for _, tc := range []verdictCase{
		{"peer pod v4", devEP0, tcp4(t, addr("10.244.2.5")), passed(tcXlReasonXL_PASS_NOT_FWDED)},
		{"no node v6", devEP0, tcp6(t, addr("fd00:244:9::9")), passed(tcXlReasonXL_PASS_NOT_FWDED)},
	} {
		t.Run(tc.name, func(t *testing.T) { h.check(t, h.links[tc.dev], tc.frame, tc.want) })
	}
}

// TestFromOverlayNoVNI: a frame on the VXLAN device without tunnel
// metadata (BPF_PROG_TEST_RUN cannot attach any) is drop_vni.
func TestFromOverlayNoVNI(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	seedOverlay(t, h, h.links[devUp])
	ifindex := h.links[devUp]
	for _, frame := range [][]byte{tcp4(t, epPeer.v4), tcp6(t, epPeer.v6)} {
		h.resetMetrics(t)
		opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
			Context: skbContext{IngressIfindex: uint32(ifindex), Ifindex: uint32(ifindex)}}
		ret, err := RunVerdict(h.do, h.objs.FromOverlay(), h.objs.Metrics(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if int32(ret) != actShot {
			t.Errorf("return %d, want TC_ACT_SHOT", int32(ret))
		}
		want := map[MetricsKey]MetricsVal{metricsKey(ifindex, tcXlReasonXL_DROP_VNI, DirIngress): {Packets: 1, Bytes: uint64(len(frame))}}
		if got := h.metrics(t); !maps.Equal(got, want) {
			t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(want))
		}
	}
}

// TestOverlayEncap: VXLAN encapsulation in BPF (XL_OVERLAY_ENCAP_BPF,
// bpf/lib/overlay_encap.h). The endpoint program pushes outer Ethernet,
// IPv4 or IPv6, UDP and VXLAN headers in front of the forwarded inner
// frame and redirects to the underlay device the FIB gives, for every
// inner/underlay family pair; the outer source port follows the inner
// flow; where it cannot (no underlay address of the peer's family) the
// device path takes the packet, untouched.
//
//	xl-ep0 (epSrc, VNI 4242) --> 10.244.4.0/24, fd00:244:5::/64: node at 203.0.113.7 (via gw 198.51.100.2 on xl-up0)
//	                         --> fd00:244:4::/64, 10.244.5.0/24: node at 2001:db8:203::7 (via gw 2001:db8:100::2)
//	                         --> 10.244.6.0/24: node at 198.51.100.9 (on link, no neighbour: bpf_redirect_neigh)
func TestOverlayEncap(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	seedOverlay(t, h, h.links[devUp])
	put := func(p, under string) {
		pp := netip.MustParsePrefix(p)
		k := PeerKey{Prefixlen: uint32(pp.Bits()), Addr: pp.Addr().As16()}
		if pp.Addr().Is4() {
			k.Prefixlen += 96
		}
		v := PeerVal{Underlay: addr(under).As16(), NodeId: 9}
		if addr(under).Is6() {
			v.Flags = PeerFlagV6
		}
		if err := h.objs.Peers().Put(&k, &v); err != nil {
			t.Fatal(err)
		}
	}
	put("10.244.4.0/24", "203.0.113.7")
	put("fd00:244:4::/64", "2001:db8:203::7")
	put("10.244.5.0/24", "2001:db8:203::7")
	put("fd00:244:5::/64", "203.0.113.7")
	put("10.244.6.0/24", "198.51.100.9")
	cfg := OverlayCfg{Ifindex: uint32(h.links[devUp]), Flags: uint16(OverlayEncapBPF), Port: 0xb512} // 4789, network order
	cfg.Src4 = addr("198.51.100.1").As4()
	cfg.Src6 = addr("2001:db8:100::1").As16()
	zero := uint32(0)
	if err := h.objs.Overlay().Put(&zero, &cfg); err != nil {
		t.Fatal(err)
	}

	type encapCase struct {
		name      string
		frame     []byte
		under     netip.Addr
		src       netip.Addr
		dmac      net.HardwareAddr // nil: bpf_redirect_neigh (L2 not written here)
		wantFwd   Reason
		wantOuter int
	}
	cases := []encapCase{
		{"v4 over v4", tcp4(t, addr("10.244.4.5")), addr("203.0.113.7"), addr("198.51.100.1"), gwMAC, tcXlReasonXL_FWD_OVERLAY, 50},
		{"v6 over v6", tcp6(t, addr("fd00:244:4::5")), addr("2001:db8:203::7"), addr("2001:db8:100::1"), gwMAC, tcXlReasonXL_FWD_OVERLAY, 70},
		{"v4 over v6", tcp4(t, addr("10.244.5.5")), addr("2001:db8:203::7"), addr("2001:db8:100::1"), gwMAC, tcXlReasonXL_FWD_OVERLAY, 70},
		{"v6 over v4", tcp6(t, addr("fd00:244:5::5")), addr("203.0.113.7"), addr("198.51.100.1"), gwMAC, tcXlReasonXL_FWD_OVERLAY, 50},
		{"no neighbour", tcp4(t, addr("10.244.6.5")), addr("198.51.100.9"), addr("198.51.100.1"), nil, tcXlReasonXL_FWD_OVERLAY, 50},
	}
	sports := map[string]uint16{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.resetMetrics(t)
			ret, out, err := h.run(tc.frame, h.links[devEP0])
			if err != nil {
				t.Fatal(err)
			}
			if ret != actRedirect {
				t.Fatalf("return %d, want TC_ACT_REDIRECT (metrics: %s)", ret, formatMetrics(h.metrics(t)))
			}
			want := map[MetricsKey]MetricsVal{metricsKey(h.links[devEP0], tc.wantFwd, DirEgress): {Packets: 1, Bytes: uint64(len(tc.frame))}}
			if got := h.metrics(t); !maps.Equal(got, want) {
				t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(want))
			}
			sports[tc.name] = checkEncap(t, tc.frame, out, tc.wantOuter, tc.src, tc.under, tc.dmac, 4242)
		})
	}

	// Entropy: flows differing only in their source port leave with
	// different outer source ports, each flow always with the same.
	t.Run("source port entropy", func(t *testing.T) {
		seen := map[uint16]bool{}
		for i := range 16 {
			f := withSrcPort(tcp4(t, addr("10.244.4.5")), uint16(40000+i))
			var first uint16
			for rep := range 2 {
				_, out, err := h.run(f, h.links[devEP0])
				if err != nil {
					t.Fatal(err)
				}
				sp := checkEncap(t, f, out, 50, addr("198.51.100.1"), addr("203.0.113.7"), gwMAC, 4242)
				if rep == 0 {
					first = sp
				} else if sp != first {
					t.Errorf("flow %d: source port %d then %d", i, first, sp)
				}
			}
			seen[first] = true
		}
		if len(seen) < 12 {
			t.Errorf("16 flows used only %d outer source ports: %v", len(seen), seen)
		}
	})

	// Without an underlay address of the peer's family the device path
	// carries the packet: the tunnel key, the inner frame only.
	cfg.Src6 = [16]byte{}
	if err := h.objs.Overlay().Put(&zero, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Run("no v6 underlay address: device", func(t *testing.T) {
		h.check(t, h.links[devEP0], tcp6(t, addr("fd00:244:4::5")),
			want{ret: actRedirect, reason: tcXlReasonXL_FWD_OVERLAY, fwd: &l2{overlayMAC, overlaySrcMAC}})
	})
	// The MTU check stays the overlay device's (PMTU as before).
	t.Run("too big", func(t *testing.T) {
		h.check(t, h.links[devEP0], pktSpec{src: epSrc.v4, dst: addr("10.244.4.5"), payload: make([]byte, 1500)}.frame(t),
			passed(tcXlReasonXL_PASS_TOO_BIG))
	})
}

// withSrcPort returns frame (TCP) with another source port (the L4
// checksum left stale: nothing on this path checks it).
func withSrcPort(frame []byte, port uint16) []byte {
	return edit(frame, func(b []byte) {
		l4 := ethHdrLen + 20
		if binary.BigEndian.Uint16(b[12:14]) == uint16(layers.EthernetTypeIPv6) {
			l4 = ethHdrLen + 40
		}
		binary.BigEndian.PutUint16(b[l4:], port)
	})
}

// checkEncap verifies out is in, forwarded, inside outer headers of
// outerLen bytes (50: IPv4, 70: IPv6) from src to under, VNI vni, and
// returns the outer UDP source port.
func checkEncap(t *testing.T, in, out []byte, outerLen int, src, under netip.Addr, dmac net.HardwareAddr, vni uint32) uint16 {
	t.Helper()
	if len(out) != len(in)+outerLen {
		t.Fatalf("output %d bytes, want %d + %d", len(out), len(in), outerLen)
	}
	if dmac != nil {
		if !bytes.Equal(out[0:6], dmac) || !bytes.Equal(out[6:12], upMAC) {
			t.Errorf("outer MACs %v > %v, want %v > %v", net.HardwareAddr(out[6:12]), net.HardwareAddr(out[0:6]), upMAC, dmac)
		}
	}
	innerLen := len(in)
	var udp []byte
	if outerLen == 50 {
		if et := binary.BigEndian.Uint16(out[12:14]); et != uint16(layers.EthernetTypeIPv4) {
			t.Errorf("outer ethertype %#x, want IPv4", et)
		}
		ip := out[14:34]
		if ip[0] != 0x45 || ip[8] != 64 || ip[9] != 17 {
			t.Errorf("outer IPv4 version/ihl %#x ttl %d proto %d, want 0x45 64 17", ip[0], ip[8], ip[9])
		}
		if tot := binary.BigEndian.Uint16(ip[2:4]); int(tot) != innerLen+36 {
			t.Errorf("outer tot_len %d, want %d", tot, innerLen+36)
		}
		if ff := binary.BigEndian.Uint16(ip[6:8]); ff != 0 {
			t.Errorf("outer frag_off %#x, want 0 (no DF, as the VXLAN device)", ff)
		}
		if got, want := binary.BigEndian.Uint16(ip[10:12]), ipv4HeaderChecksum(ip); got != want {
			t.Errorf("outer IPv4 checksum %#04x, want %#04x", got, want)
		}
		if s, d := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])); s != src || d != under {
			t.Errorf("outer %s > %s, want %s > %s", s, d, src, under)
		}
		udp = out[34:]
	} else {
		if et := binary.BigEndian.Uint16(out[12:14]); et != uint16(layers.EthernetTypeIPv6) {
			t.Errorf("outer ethertype %#x, want IPv6", et)
		}
		ip := out[14:54]
		if ip[0]>>4 != 6 || ip[6] != 17 || ip[7] != 64 {
			t.Errorf("outer IPv6 version %d next %d hop limit %d, want 6 17 64", ip[0]>>4, ip[6], ip[7])
		}
		if binary.BigEndian.Uint32(ip[0:4])&0xfffff == 0 {
			t.Errorf("outer flow label 0, want one from the flow's hash")
		}
		if pl := binary.BigEndian.Uint16(ip[4:6]); int(pl) != innerLen+16 {
			t.Errorf("outer payload length %d, want %d", pl, innerLen+16)
		}
		if s, d := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])); s != src || d != under {
			t.Errorf("outer %s > %s, want %s > %s", s, d, src, under)
		}
		udp = out[54:]
	}
	sport := binary.BigEndian.Uint16(udp[0:2])
	if sport < 32768 || sport >= 61000 {
		t.Errorf("outer source port %d, want 32768-60999", sport)
	}
	if dp := binary.BigEndian.Uint16(udp[2:4]); dp != 4789 {
		t.Errorf("outer destination port %d, want 4789", dp)
	}
	if l := binary.BigEndian.Uint16(udp[4:6]); int(l) != innerLen+16 {
		t.Errorf("UDP length %d, want %d", l, innerLen+16)
	}
	if c := binary.BigEndian.Uint16(udp[6:8]); c != 0 {
		t.Errorf("UDP checksum %#04x, want 0", c)
	}
	vx := udp[8:16]
	if vx[0] != 0x08 || vx[1] != 0 || vx[2] != 0 || vx[3] != 0 || vx[7] != 0 {
		t.Errorf("VXLAN flags/reserved % x, want 08 00 00 00 .. 00", vx)
	}
	if got := uint32(vx[4])<<16 | uint32(vx[5])<<8 | uint32(vx[6]); got != vni {
		t.Errorf("VNI %d, want %d", got, vni)
	}
	checkForwarded(t, in, out[outerLen:], overlayMAC, overlaySrcMAC)
	return sport
}
