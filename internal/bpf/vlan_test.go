package bpf

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf/bpftest"

	"github.com/google/gopacket/layers"
)

// VLAN networks (bpf/lib/vlan.h), through the uplink's tc programs: a
// frame tagged with a VLAN network's VID loses its tag and reaches that
// network's endpoints or, over the overlay, peer nodes' pods; the rest of
// the VLAN's traffic goes to Linux through the VLAN's port; untagged,
// nothing new reaches a VLAN network; another VID is Linux's, untouched.
// What Linux sends out of the port's other end is tagged and sent out of
// the uplink.
//
//	outside 203.0.113.9 --> xl-up0 (uplink) --VID 100--> network 1 (port xl-ep1p, device xl-ep1)
//	                                        --VID 300--> network 3
//	                                        --VID 200--> nobody's
//	epPeer  (network 1, on VLAN 100: XL_EP_VLAN)
//	epOther (network 2, no VLAN)
//	10.244.2.0/24, fd00:244:2::/64: node 7's pods, over the overlay (xl-up0)
func TestVLAN(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	seedOverlay(t, h, h.links[devUp])
	vlanPeer := NewEndpointVal(epPeer.ifindex, 1, epPeer.mac, epPeer.hostMAC, 1500, false)
	vlanPeer.Flags |= EPFlagVLAN
	other := NewEndpointVal(epOther.ifindex, 2, epOther.mac, epOther.hostMAC, 1500, false)
	for a, v := range map[netip.Addr]EndpointVal{epPeer.v4: vlanPeer, epPeer.v6: vlanPeer, epOther.v4: other, epOther.v6: other} {
		if err := h.objs.Endpoints().Put(KeyFromAddr(a), v); err != nil {
			t.Fatal(err)
		}
	}
	up, port, dev := h.links[devUp], h.links[devEP1+"p"], h.links[devEP1]
	for vid, v := range map[uint32]VlanVal{
		100: {NetworkId: 1, Dev: uint32(dev), Port: uint32(port), Uplink: uint32(up)},
		300: {NetworkId: 3, Dev: 9001, Port: 9002, Uplink: uint32(up)},
	} {
		if err := h.objs.VLANs().Put(&vid, &v); err != nil {
			t.Fatal(err)
		}
		for _, ifindex := range []uint32{v.Dev, v.Port} {
			if err := h.objs.VLANDev().Put(&ifindex, &vid); err != nil {
				t.Fatal(err)
			}
		}
	}
	out4, out6 := addr("203.0.113.9"), addr("2001:db8:203::9")
	from := func(src, dst netip.Addr) []byte { return pktSpec{src: src, dst: dst}.frame(t) }
	arp := bpftest.Serialize(t,
		&layers.Ethernet{SrcMAC: gwMAC, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: gwMAC, SourceProtAddress: []byte{10, 244, 1, 200},
			DstHwAddress: make([]byte, 6), DstProtAddress: epPeer.v4.AsSlice()})
	type wantUp struct {
		ret    int32
		reason Reason
		fwd    *l2 // forwarded: the untagged frame with these MACs, TTL down
		same   bool
		peer   int // endpoint ifindex counting a delivery
	}
	delivered := wantUp{ret: actRedirect, reason: fwdPeer, fwd: &l2{epPeer.mac, epPeer.hostMAC}, peer: epPeer.ifindex}
	tunnelled := wantUp{ret: actRedirect, reason: tcXlReasonXL_FWD_OVERLAY, fwd: &l2{overlayMAC, overlaySrcMAC}}
	toPort := wantUp{ret: actRedirect, reason: tcXlReasonXL_FWD_VLAN}
	drop := func(r Reason) wantUp { return wantUp{ret: actShot, reason: r} }
	for _, tc := range []struct {
		name  string
		frame []byte // untagged; tagged with vids on the uplink
		vids  []uint16
		want  wantUp
	}{
		{"own vlan to its endpoint v4", from(out4, epPeer.v4), []uint16{100}, delivered},
		{"own vlan to its endpoint v6", from(out6, epPeer.v6), []uint16{100}, delivered},
		{"untagged to a vlan endpoint v4", from(out4, epPeer.v4), nil, drop(dropVLAN)},
		{"untagged to a vlan endpoint v6", from(out6, epPeer.v6), nil, drop(dropVLAN)},
		{"wrong vlan v4", from(out4, epPeer.v4), []uint16{300}, drop(dropVLAN)},
		{"wrong vlan v6", from(out6, epPeer.v6), []uint16{300}, drop(dropVLAN)},
		{"vlan to another network v4", from(out4, epOther.v4), []uint16{100}, drop(dropVLAN)},
		{"vlan to another network v6", from(out6, epOther.v6), []uint16{100}, drop(dropVLAN)},
		{"double-tagged", from(out4, epPeer.v4), []uint16{100, 100}, drop(dropVLAN)},
		// Untagged to an endpoint of no VLAN: as before, Linux (where
		// the endpoint's own checks run).
		{"untagged to a plain endpoint", from(out4, epOther.v4), nil, wantUp{ret: actPass, reason: passNotFwded, same: true}},
		// A VID no network has: Linux's, tag and all.
		{"another vid v4", from(out4, epPeer.v4), []uint16{200}, wantUp{ret: actPass, reason: passNonIP, same: true}},
		{"another vid v6", from(out6, epOther.v6), []uint16{200}, wantUp{ret: actPass, reason: passNonIP, same: true}},
		// VLAN to VXLAN: a VLAN host to a peer node's pod, with the
		// VLAN network's VNI.
		{"vlan to a peer's pod v4", from(addr("10.244.1.200"), addr("10.244.2.5")), []uint16{100}, tunnelled},
		{"vlan to a peer's pod v6", from(addr("fd00:244:1::c8"), addr("fd00:244:2::5")), []uint16{100}, tunnelled},
		{"vlan to no node's address", from(addr("10.244.1.200"), addr("10.244.9.9")), []uint16{100}, drop(tcXlReasonXL_DROP_NO_PEER)},
		// The rest of the VLAN's traffic is Linux's, on the VLAN's
		// device: through the port.
		{"vlan arp", arp, []uint16{100}, toPort},
		{"vlan to the node", from(addr("10.244.1.200"), addr("198.51.100.1")), []uint16{100}, toPort},
		{"untagged to a peer's pod", from(out4, addr("10.244.2.5")), nil, wantUp{ret: actPass, reason: passNotFwded, same: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.frame
			for i := len(tc.vids) - 1; i >= 0; i-- {
				in = tag(in, tc.vids[i])
			}
			h.resetMetrics(t)
			ret, out, err := h.runProg(h.objs.TCFromUplink(), in, up)
			if err != nil {
				t.Fatal(err)
			}
			if ret != tc.want.ret {
				t.Errorf("return %d, want %d (metrics %s)", ret, tc.want.ret, formatMetrics(h.metrics(t)))
			}
			switch {
			case tc.want.fwd != nil:
				checkForwarded(t, tc.frame, out, tc.want.fwd.dst, tc.want.fwd.src)
			case tc.want.same && !bytes.Equal(out, in):
				t.Errorf("frame changed: %s", frameDiff(out, in))
			case tc.want.reason == tcXlReasonXL_FWD_VLAN && !bytes.Equal(out, tc.frame):
				t.Errorf("frame to the port is not the untagged frame: %s", frameDiff(out, tc.frame))
			}
			want := []ctMetric{{up, tc.want.reason, DirIngress}}
			if tc.want.peer != 0 {
				want = append(want, ctMetric{tc.want.peer, fwdPeer, DirIngress})
			}
			h.wantMetrics(t, len(in), want...)
		})
	}
	// Out of the port: tagged (in the skb, where the kernel keeps a pushed
	// tag) and sent to the uplink.
	for _, tc := range []struct {
		name string
		dev  int
		want wantUp
	}{
		{"to the vlan", port, wantUp{ret: actRedirect, reason: tcXlReasonXL_FWD_VLAN}},
		{"not a port", h.links[devEP0+"p"], drop(tcXlReasonXL_DROP_REDIRECT)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := from(addr("10.244.1.1"), addr("10.244.1.200"))
			h.resetMetrics(t)
			ret, _, err := h.runProg(h.objs.ToVLAN(), frame, tc.dev)
			if err != nil {
				t.Fatal(err)
			}
			if ret != tc.want.ret {
				t.Errorf("return %d, want %d (metrics %s)", ret, tc.want.ret, formatMetrics(h.metrics(t)))
			}
			h.wantMetrics(t, len(frame), ctMetric{tc.dev, tc.want.reason, DirEgress})
		})
	}
}

// tag returns frame with an 802.1Q tag of vid in front of its ethertype.
func tag(frame []byte, vid uint16) []byte {
	out := append([]byte{}, frame[:12]...)
	out = binary.BigEndian.AppendUint16(out, uint16(layers.EthernetTypeDot1Q))
	out = binary.BigEndian.AppendUint16(out, vid)
	return append(out, frame[12:]...)
}
