package bpf

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// Cross-node traffic (bpf/lib/overlay.h): the endpoint program tunnels a
// packet for a peer node's pod through the VXLAN device, drops one for a
// cluster address no node owns, and the overlay's receive program refuses
// a packet without a known VNI.
//
//	xl-ep0 (epSrc, network 1, VNI 4242) --> 10.244.2.0/24, fd00:244:2::/64: node 7 at 192.0.2.7 / 2001:db8::7
//	                                    --> 10.244.3.0/24: node 8, found down (drop_peer_down)
//	                                    --> fd00:244:3::/64: node 8 natively routed, found down (drop_peer_down)
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
