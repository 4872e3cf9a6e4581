package bpf

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf/bpftest"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
)

// PMTU and ICMP errors for service flows from off the node whose backend
// is on another node (lib/nat_too_big.h, tc_uplink.c), in the harness of
// remote_test.go, the overlay (xl-up0) at MTU 1450:
//
//	client --> uplink [DNAT + SNAT to 10.244.1.0] --> too big for the overlay
//	client <-- ICMP frag needed / packet too big, MTU 1450, from the VIP,
//	           quoting the packet as the client sent it
//
// Every byte of the answer is checked against a frame built here from the
// client's own bytes (the quote) and headers written field by field, with
// the checksums computed from scratch. Also: an IPv4 datagram without DF
// stays Linux's (pass_too_big, it fragments); ICMP errors about such flows
// arriving on the uplink (the backend's port unreachable, natively routed;
// a router's frag needed about the reply) are translated and forwarded
// (before: passed to Linux untranslated, pass_not_fwded).
func TestUplinkRemoteTooBig(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	seedOverlay(t, h, h.links[devUp])
	const mtu = 1450
	if err := h.do(func() error {
		l, err := netlink.LinkByIndex(h.links[devUp])
		if err != nil {
			return err
		}
		return netlink.LinkSetMTU(l, mtu)
	}); err != nil {
		t.Fatal(err)
	}
	clusterV4, clusterV6 := addr("10.244.1.0"), addr("fd00:244:1::")
	c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: natPortMin, NatPortMax: natPortMax,
		ClashPortMin: natPortMin, ClashPortMax: natPortMax, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16(),
		ClusterV4: clusterV4.As16(), ClusterV6: clusterV6.As16()}
	if err := h.objs.Config().Put(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	peerPod := endpoint{v4: addr("10.244.2.5"), v6: addr("fd00:244:2::5")}
	h.putService(t, testService{id: 71, vip: ap(nodeV4, 30090), proto: ctUDP, backends: []endpointPort{{peerPod, 9090}}})
	h.putService(t, testService{id: 72, vip: ap(nodeV6, 30090), proto: ctUDP, backends: []endpointPort{{peerPod, 9090}}})
	h.putService(t, testService{id: 73, vip: ap(nodeV4, 30091), proto: ctTCP, backends: []endpointPort{{peerPod, 9091}}})
	h.putService(t, testService{id: 74, vip: ap(nodeV6, 30091), proto: ctTCP, backends: []endpointPort{{peerPod, 9091}}})
	up := h.links[devUp]
	dropTooBig, passTooBig := tcXlReasonXL_DROP_TOO_BIG, tcXlReasonXL_PASS_TOO_BIG

	run := func(t *testing.T, in []byte) (int32, []byte) {
		t.Helper()
		h.resetMetrics(t)
		ret, out, err := h.runProg(h.objs.TCFromUplink(), in, up)
		if err != nil {
			t.Fatal(err)
		}
		return ret, out
	}
	// answered checks out is the error about in (the client's frame, from
	// vip) and what was counted.
	answered := func(t *testing.T, ret int32, in, out []byte, vip netip.Addr) {
		t.Helper()
		if ret != actRedirect {
			t.Errorf("return value %d, want TC_ACT_REDIRECT (the answer bounced)", ret)
		}
		if err := ctChecksums(out); err != nil {
			t.Errorf("answer: %v", err)
		}
		if w := tooBigAnswer(t, in, vip, mtu); !bytes.Equal(out, w) {
			t.Errorf("answer differs: %s", frameDiff(out, w))
		}
		h.wantMetrics(t, len(in), ctMetric{up, dropTooBig, DirIngress})
	}

	for _, v6 := range []bool{false, true} {
		name, node, client, cluster, backend := "ipv4", nodeV4, ap(remoteV4, 40100), clusterV4, peerPod.v4
		if v6 {
			name, node, client, cluster, backend = "ipv6", nodeV6, ap(remoteV6, 40100), clusterV6, peerPod.v6
		}
		vipUDP, vipTCP := ap(node, 30090), ap(node, 30091)
		t.Run(name+"/udp new flow answered", func(t *testing.T) {
			in := bigFrame(t, client, vipUDP, ctUDP, 1480, true, "")
			ret, out := run(t, in)
			answered(t, ret, in, out, node)
			// The flow is tracked as any: its next packets fit or not.
			h.wantBoth(t, ctUDP, client, vipUDP, ap(backend, 9090), cluster, natPortMin, natPortMax)
		})
		t.Run(name+"/udp established flow answered", func(t *testing.T) {
			in := bigFrame(t, client, vipUDP, ctUDP, 3000, true, "")
			ret, out := run(t, in)
			answered(t, ret, in, out, node)
		})
		t.Run(name+"/udp that fits goes over the overlay", func(t *testing.T) {
			in := bigFrame(t, client, vipUDP, ctUDP, 100, true, "")
			ret, _ := run(t, in)
			if ret != actRedirect {
				t.Errorf("return value %d, want TC_ACT_REDIRECT", ret)
			}
			h.wantMetrics(t, len(in), ctMetric{up, tcXlReasonXL_FWD_OVERLAY, DirIngress})
		})
		t.Run(name+"/tcp segment answered with its checksum as sent", func(t *testing.T) {
			tc := ap(client.Addr(), 40101)
			ret, in, out := h.ctRun(t, progFromUplink, devUp, ctPkt{src: tc, dst: vipTCP, flags: "S"}.fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			from := h.wantBoth(t, ctTCP, tc, vipTCP, ap(backend, 9091), cluster, natPortMin, natPortMax)
			ret, in, out = h.ctRun(t, progFromUplink, devUp, ctPkt{src: ap(backend, 9091), dst: from, flags: "SA"}.fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			in = bigFrame(t, tc, vipTCP, ctTCP, 1600, true, "A")
			ret, out = run(t, in)
			answered(t, ret, in, out, node)
		})
	}

	t.Run("ipv4/udp without DF: Linux fragments", func(t *testing.T) {
		in := bigFrame(t, ap(remoteV4, 40102), ap(nodeV4, 30090), ctUDP, 1480, false, "")
		ret, _ := run(t, in)
		if ret != actPass {
			t.Errorf("return value %d, want TC_ACT_UNSPEC", ret)
		}
		h.wantMetrics(t, len(in), ctMetric{up, passTooBig, DirIngress})
	})

	// ICMP errors about such a flow, arriving on the uplink.
	router4, router6 := addr("203.0.113.254"), addr("2001:db8:203::fe")
	for _, v6 := range []bool{false, true} {
		name, node, client, cluster, backend, router := "ipv4", nodeV4, ap(remoteV4, 40200), clusterV4, ap(peerPod.v4, 9090), router4
		unreach, unreachCode, tooBig, tooBigCode := uint8(3), uint8(3), uint8(3), uint8(4)
		if v6 {
			name, node, client, cluster, backend, router = "ipv6", nodeV6, ap(remoteV6, 40200), clusterV6, ap(peerPod.v6, 9090), router6
			unreach, unreachCode, tooBig, tooBigCode = 1, 4, 2, 0
		}
		vip := ap(node, 30090)
		var from netip.AddrPort
		t.Run(name+"/flow", func(t *testing.T) {
			ret, in, out := h.ctRun(t, progFromUplink, devUp, ctPkt{src: client, dst: vip, proto: ctUDP}.fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			from = h.wantBoth(t, ctUDP, client, vip, backend, cluster, natPortMin, natPortMax)
		})
		if !from.IsValid() {
			continue
		}
		t.Run(name+"/backend's port unreachable, natively routed: to the client", func(t *testing.T) {
			e := icmpErr{src: backend.Addr(), dst: from.Addr(), typ: unreach, code: unreachCode,
				quote: ctPkt{src: from, dst: backend, proto: ctUDP, ttl: 63}, srcMAC: gwMAC, dstMAC: upMAC}
			want := e
			want.src, want.dst = node, client.Addr()
			want.quote.src, want.quote.dst = client, vip
			want.srcMAC, want.dstMAC, want.ttl = upMAC, gwMAC, 63
			h.icmpForwarded(t, progFromUplink, devUp, e, want, ctMetric{up, fwdFIB, DirIngress})
		})
		t.Run(name+"/a router's frag needed about the reply: to the backend", func(t *testing.T) {
			e := icmpErr{src: router, dst: node, typ: tooBig, code: tooBigCode, rest: 1280,
				quote: ctPkt{src: vip, dst: client, proto: ctUDP, ttl: 63}, srcMAC: gwMAC, dstMAC: upMAC}
			want := e
			want.dst = backend.Addr()
			want.quote.src, want.quote.dst = backend, from
			want.srcMAC, want.dstMAC, want.ttl = overlaySrcMAC, overlayMAC, 63
			h.icmpForwarded(t, progFromUplink, devUp, e, want, ctMetric{up, tcXlReasonXL_FWD_OVERLAY, DirIngress})
		})
	}
}

// bigFrame is a client's frame from the gateway: UDP, or TCP with flags,
// carrying n bytes of payload, IPv4 with or without DF.
func bigFrame(tb testing.TB, src, dst netip.AddrPort, proto layers.IPProtocol, n int, df bool, flags string) []byte {
	tb.Helper()
	pl := make([]byte, n)
	for i := range pl {
		pl[i] = byte(i % 251)
	}
	eth := &layers.Ethernet{SrcMAC: gwMAC, DstMAC: upMAC}
	var ip interface {
		gopacket.NetworkLayer
		gopacket.SerializableLayer
	}
	if src.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Id: 0x4d2, Protocol: proto,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		if df {
			ip4.Flags = layers.IPv4DontFragment
		}
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, FlowLabel: 0x12345,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	}
	var l4 gopacket.SerializableLayer
	if proto == ctTCP {
		t := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()),
			Seq: 0x1001, Ack: 0x2001, Window: 64240, ACK: true}
		t.SetNetworkLayerForChecksum(ip)
		l4 = t
	} else {
		u := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
		u.SetNetworkLayerForChecksum(ip)
		l4 = u
	}
	return bpftest.Serialize(tb, eth, ip, l4, gopacket.Payload(pl))
}

// tooBigAnswer is the error in must get, written field by field: from
// vip (the service's address: where the client sent in) back to the
// client, the gateway's MAC as destination; IPv4 fragmentation needed
// (type 3 code 4, the MTU in the second word's low half), TOS 0xc0, no
// DF, TTL 64, ID 0, quoting in's IP packet to 576 bytes in all; ICMPv6
// packet too big (type 2, the MTU the whole second word), hop limit 64,
// quoting to 1280 bytes in all.
func tooBigAnswer(tb testing.TB, in []byte, vip netip.Addr, mtu uint32) []byte {
	tb.Helper()
	ipPkt := in[ethHdrLen:]
	client := netip.Addr{}
	b := append([]byte{}, gwMAC...)
	b = append(b, upMAC...)
	if vip.Is4() {
		client = netip.AddrFrom4([4]byte(ipPkt[12:16]))
		q := ipPkt[:min(len(ipPkt), 576-28)]
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		hdr := []byte{0x45, 0xc0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0}
		binary.BigEndian.PutUint16(hdr[2:], uint16(28+len(q)))
		hdr = append(hdr, vip.AsSlice()...)
		hdr = append(hdr, client.AsSlice()...)
		binary.BigEndian.PutUint16(hdr[10:], checksum(hdr))
		ic := []byte{3, 4, 0, 0, 0, 0}
		ic = binary.BigEndian.AppendUint16(ic, uint16(mtu))
		ic = append(ic, q...)
		binary.BigEndian.PutUint16(ic[2:], checksum(ic))
		return append(append(b, hdr...), ic...)
	}
	client = netip.AddrFrom16([16]byte(ipPkt[8:24]))
	q := ipPkt[:min(len(ipPkt), 1280-48)]
	b = binary.BigEndian.AppendUint16(b, 0x86dd)
	hdr := []byte{0x60, 0, 0, 0, 0, 0, 58, 64}
	binary.BigEndian.PutUint16(hdr[4:], uint16(8+len(q)))
	hdr = append(hdr, vip.AsSlice()...)
	hdr = append(hdr, client.AsSlice()...)
	ic := []byte{2, 0, 0, 0}
	ic = binary.BigEndian.AppendUint32(ic, mtu)
	ic = append(ic, q...)
	pseudo := append(bytes.Clone(hdr[8:40]), 0, 0, byte(len(ic)>>8), byte(len(ic)), 0, 0, 0, 58)
	binary.BigEndian.PutUint16(ic[2:], checksum(append(pseudo, ic...)))
	return append(append(b, hdr...), ic...)
}
