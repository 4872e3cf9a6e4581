package bpf

import (
	"bytes"
	"net/netip"
	"testing"
)

// VLAN networks (bpf/lib/vlan.h), through the uplink's tc program: what
// arrives on xlaned's VLAN device of a network reaches that network's
// endpoints and, over the overlay, peer nodes' pods; untagged, nothing new
// reaches a VLAN network; a frame still tagged at tc is Linux's (its VLAN
// device gets it).
//
//	outside 203.0.113.9 --> xl-up0   (untagged uplink)
//	                    --> xl-up0p  (VLAN device of network 1, as if xlvl100)
//	                    --> xl-ep1p  (VLAN device of network 3)
//	epPeer  (network 1, on its VLAN: XL_EP_VLAN)
//	epOther (network 2, no VLAN)
//	10.244.2.0/24, fd00:244:2::/64: node 7's pods, over the overlay (xl-up0)
func TestFromUplinkVLAN(t *testing.T) {
	h := newHarness(t)
	seedOverlay(t, h, h.links[devUp])
	vlanPeer := NewEndpointVal(epPeer.ifindex, 1, epPeer.mac, epPeer.hostMAC, 1500, false)
	vlanPeer.Flags |= EPFlagVLAN
	other := NewEndpointVal(epOther.ifindex, 2, epOther.mac, epOther.hostMAC, 1500, false)
	for _, a := range []netip.Addr{epPeer.v4, epPeer.v6} {
		if err := h.objs.Endpoints().Put(KeyFromAddr(a), vlanPeer); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []netip.Addr{epOther.v4, epOther.v6} {
		if err := h.objs.Endpoints().Put(KeyFromAddr(a), other); err != nil {
			t.Fatal(err)
		}
	}
	vlan1, vlan3 := h.links[devUp+"p"], h.links[devEP1+"p"]
	for dev, net := range map[int]uint32{vlan1: 1, vlan3: 3} {
		k := uint32(dev)
		if err := h.objs.VLANDev().Put(&k, &net); err != nil {
			t.Fatal(err)
		}
	}
	out4, out6 := addr("203.0.113.9"), addr("2001:db8:203::9")
	from := func(src, dst netip.Addr, vlan uint16) []byte {
		return pktSpec{src: src, dst: dst, vlan: vlan}.frame(t)
	}
	type wantUp struct {
		ret    int32
		reason Reason
		fwd    *l2 // nil: the frame leaves unchanged
		peer   int // endpoint ifindex counting a delivery
	}
	delivered := wantUp{actRedirect, fwdPeer, &l2{epPeer.mac, epPeer.hostMAC}, epPeer.ifindex}
	tunnelled := wantUp{actRedirect, tcXlReasonXL_FWD_OVERLAY, &l2{overlayMAC, overlaySrcMAC}, 0}
	for _, tc := range []struct {
		name  string
		dev   int
		frame []byte
		want  wantUp
	}{
		{"own vlan to its endpoint v4", vlan1, from(out4, epPeer.v4, 0), delivered},
		{"own vlan to its endpoint v6", vlan1, from(out6, epPeer.v6, 0), delivered},
		{"untagged to a vlan endpoint v4", h.links[devUp], from(out4, epPeer.v4, 0), wantUp{ret: actShot, reason: dropVLAN}},
		{"untagged to a vlan endpoint v6", h.links[devUp], from(out6, epPeer.v6, 0), wantUp{ret: actShot, reason: dropVLAN}},
		{"wrong vlan v4", vlan3, from(out4, epPeer.v4, 0), wantUp{ret: actShot, reason: dropVLAN}},
		{"wrong vlan v6", vlan3, from(out6, epPeer.v6, 0), wantUp{ret: actShot, reason: dropVLAN}},
		{"vlan to another network v4", vlan1, from(out4, epOther.v4, 0), wantUp{ret: actShot, reason: dropVLAN}},
		{"vlan to another network v6", vlan1, from(out6, epOther.v6, 0), wantUp{ret: actShot, reason: dropVLAN}},
		// Untagged to an endpoint of no VLAN: as before, Linux (where
		// the endpoint's own checks run).
		{"untagged to a plain endpoint", h.links[devUp], from(out4, epOther.v4, 0), wantUp{ret: actPass, reason: passNotFwded}},
		// Still tagged at tc (in the skb or, here, in the frame): the
		// inner packet is never delivered by this device's program.
		{"tagged on the uplink v4", h.links[devUp], from(out4, epPeer.v4, 100), wantUp{ret: actPass, reason: passNonIP}},
		{"tagged on the uplink v6", h.links[devUp], from(out6, epOther.v6, 100), wantUp{ret: actPass, reason: passNonIP}},
		{"double-tagged on a vlan", vlan1, from(out4, epPeer.v4, 200), wantUp{ret: actPass, reason: passNonIP}},
		// VLAN to VXLAN: a VLAN host to a peer node's pod, with the
		// VLAN network's VNI.
		{"vlan to a peer's pod v4", vlan1, from(addr("10.244.1.200"), addr("10.244.2.5"), 0), tunnelled},
		{"vlan to a peer's pod v6", vlan1, from(addr("fd00:244:1::c8"), addr("fd00:244:2::5"), 0), tunnelled},
		{"vlan to no node's address", vlan1, from(addr("10.244.1.200"), addr("10.244.9.9"), 0), wantUp{ret: actShot, reason: tcXlReasonXL_DROP_NO_PEER}},
		{"untagged to a peer's pod", h.links[devUp], from(out4, addr("10.244.2.5"), 0), wantUp{ret: actPass, reason: passNotFwded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.resetMetrics(t)
			ret, out, err := h.runProg(h.objs.TCFromUplink(), tc.frame, tc.dev)
			if err != nil {
				t.Fatal(err)
			}
			if ret != tc.want.ret {
				t.Errorf("return %d, want %d (metrics %s)", ret, tc.want.ret, formatMetrics(h.metrics(t)))
			}
			if tc.want.fwd != nil {
				checkForwarded(t, tc.frame, out, tc.want.fwd.dst, tc.want.fwd.src)
			} else if !bytes.Equal(out[:len(tc.frame)], tc.frame) {
				t.Errorf("frame changed: %s", frameDiff(out[:len(tc.frame)], tc.frame))
			}
			want := []ctMetric{{tc.dev, tc.want.reason, DirIngress}}
			if tc.want.peer != 0 {
				want = append(want, ctMetric{tc.want.peer, fwdPeer, DirIngress})
			}
			h.wantMetrics(t, len(tc.frame), want...)
		})
	}
}
