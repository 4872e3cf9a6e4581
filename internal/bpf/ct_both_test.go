package bpf

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/bpf/bpftest"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Flows translated both ways (CT_NAT_BOTH: hairpin, a reply-tuple clash
// remapped to another source port) and ICMP errors about translated flows,
// in the harness of ct_test.go. Expected frames are built anew by gopacket
// with every checksum (outer, quoted IPv4 header, quoted UDP, ICMP)
// computed from scratch.

// bothOf is what a CT_NAT_BOTH entry does: the destination's and the
// source's replacements.
func bothOf(v CTVal) (dst, src netip.AddrPort) {
	return ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort)),
		ap(netip.AddrFrom16(v.NatSaddr).Unmap(), nbo(v.NatSport))
}

// wantBoth checks the two entries of a flow client -> dst translated to
// to, its source to srcAddr and a port of [lo, hi], and returns that
// source.
func (h *harness) wantBoth(t *testing.T, proto layers.IPProtocol, client, dst, to netip.AddrPort,
	srcAddr netip.Addr, lo, hi uint16) netip.AddrPort {
	t.Helper()
	ok := ctKeyOf(proto, client, dst)
	ov, found := h.ctLookup(ok)
	if !found {
		t.Fatalf("no original entry %v", ok)
	}
	gotTo, from := bothOf(ov)
	if CTNat(ov.Nat) != CTNatBoth || ov.Dir != uint8(tcCtDirCT_DIR_ORIG) || gotTo != to ||
		from.Addr() != srcAddr || from.Port() < lo || from.Port() > hi {
		t.Fatalf("original entry %v: nat %d dir %d, to %v from %v; want nat %d, to %v from %v:[%d-%d]",
			ok, ov.Nat, ov.Dir, gotTo, from, CTNatBoth, to, srcAddr, lo, hi)
	}
	rk := ctKeyOf(proto, to, from)
	rv, found := h.ctLookup(rk)
	if !found {
		t.Fatalf("no reply entry %v", rk)
	}
	rTo, rFrom := bothOf(rv)
	if CTNat(rv.Nat) != CTNatBoth || rv.Dir != uint8(CTDirReply) || rTo != client || rFrom != dst {
		t.Errorf("reply entry %v: nat %d dir %d, to %v from %v; want to %v from %v",
			rk, rv.Nat, rv.Dir, rTo, rFrom, client, dst)
	}
	return from
}

// TestCTHairpin: a container reaching its own published port, or a
// service it backs, through the node: destination and source translated
// (source to the node's address and a masquerade port), so the server's
// reply leaves the container and comes back through xlane.
func TestCTHairpin(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.publish(t, ctTCP, 8080, ap(epSrc.v4, 80))
	h.publish(t, ctTCP, 8080, ap(epSrc.v6, 80))
	vip4, vip6 := ap(addr("10.96.5.1"), 80), ap(addr("fd00:96::5"), 80)
	h.putService(t, testService{id: 51, vip: vip4, proto: ctTCP, backends: []endpointPort{{epSrc, 8081}}})
	h.putService(t, testService{id: 52, vip: vip6, proto: ctTCP, backends: []endpointPort{{epSrc, 8081}}})
	ep0 := h.links[devEP0]
	for _, c := range []struct {
		name            string
		client, dst, to netip.AddrPort
		node            netip.Addr
	}{
		{"ipv4/own published port", ap(epSrc.v4, 40000), ap(nodeV4, 8080), ap(epSrc.v4, 80), nodeV4},
		{"ipv6/own published port", ap(epSrc.v6, 40000), ap(nodeV6, 8080), ap(epSrc.v6, 80), nodeV6},
		{"ipv4/service it backs", ap(epSrc.v4, 40001), vip4, ap(epSrc.v4, 8081), nodeV4},
		{"ipv6/service it backs", ap(epSrc.v6, 40001), vip6, ap(epSrc.v6, 8081), nodeV6},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ctPkt{src: c.client, dst: c.dst, flags: "S"}.sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			from := h.wantBoth(t, ctTCP, c.client, c.dst, c.to, c.node, natPortMin, natPortMax)
			wantFrame(t, out, ctPkt{src: from, dst: c.to, flags: "S"}.sentBy(epSrc).routedTo(epSrc.mac, epSrc.hostMAC))
			h.wantMetrics(t, len(in), ctMetric{ep0, fwdPeer, DirEgress}, ctMetric{ep0, fwdPeer, DirIngress})

			// The server's reply, to the node's address: back to the
			// client as from the address it connected to.
			rp := ctPkt{src: c.to, dst: from, flags: "SA"}.sentBy(epSrc)
			ret, in, out = h.ctRun(t, progFromEP, devEP0, rp)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, ctPkt{src: c.dst, dst: c.client, flags: "SA"}.sentBy(epSrc).routedTo(epSrc.mac, epSrc.hostMAC))
			h.wantMetrics(t, len(in), ctMetric{ep0, fwdPeer, DirEgress}, ctMetric{ep0, fwdPeer, DirIngress})

			p = ctPkt{src: c.client, dst: c.dst, flags: "A"}.sentBy(epSrc)
			ret, in, out = h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, ctPkt{src: from, dst: c.to, flags: "A"}.sentBy(epSrc).routedTo(epSrc.mac, epSrc.hostMAC))
			if v, _ := h.ctLookup(ctKeyOf(ctTCP, c.client, c.dst)); CTState(v.State) != ctStEst {
				t.Errorf("state %d after the handshake, want established", v.State)
			}
		})
	}
	t.Run("no node address: counted pass", func(t *testing.T) {
		c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: natPortMin, NatPortMax: natPortMax}
		if err := h.objs.Config().Put(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		defer h.setNode(t, natPortMin, natPortMax)
		f := ctFlow{src: ap(epSrc.v4, 40002), dst: vip4}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{ep0, passNATPorts, DirEgress})
		if _, ok := h.ctLookup(f.origKey()); ok {
			t.Errorf("flow without a hairpin source was tracked")
		}
	})
}

// TestCTServiceReplyClash: two flows from the same client address and port
// to two VIPs (or to a VIP and, directly, its backend) that land on the
// same backend would have the same reply tuple. As Linux's NAT does, the
// second one gets another source port (from the clash range); with none
// free it is counted (pass_nat_ports) and left to Linux untranslated.
func TestCTServiceReplyClash(t *testing.T) {
	h := newHarness(t)
	const lo, hi = 62000, 62001 // two ports: the third clash finds none
	h.setNode(t, lo, hi)
	be := []endpointPort{{epNoFwd, 8080}}
	vip1, vip2 := ap(addr("10.96.2.1"), 80), ap(addr("10.96.2.2"), 80)
	h.putService(t, testService{id: 41, vip: vip1, proto: ctTCP, backends: be})
	h.putService(t, testService{id: 42, vip: vip2, proto: ctTCP, backends: be})
	backend := ap(epNoFwd.v4, 8080)
	ep0, ep1 := h.links[devEP0], h.links[devEP1]
	for _, c := range []struct {
		name  string
		first ctFlow
	}{
		{"same port to two VIPs with a common backend", ctFlow{src: ap(epSrc.v4, 44000), dst: vip1, nat: CTNatDst, to: backend}},
		{"same port to a backend directly and through a VIP", ctFlow{src: ap(epSrc.v4, 44001), dst: backend}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.first.orig("S").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, backend).routedTo(epNoFwd.mac, epNoFwd.hostMAC))

			client := c.first.src
			p2 := ctPkt{src: client, dst: vip2, flags: "S"}.sentBy(epSrc)
			ret, in, out = h.ctRun(t, progFromEP, devEP0, p2)
			wantVerdict(t, ret, actRedirect, in, out)
			h.wantMetrics(t, len(in), ctMetric{ep0, fwdPeer, DirEgress}, ctMetric{ep1, fwdPeer, DirIngress})
			from := h.wantBoth(t, ctTCP, client, vip2, backend, client.Addr(), lo, hi)
			wantFrame(t, out, ctPkt{src: from, dst: backend, flags: "S"}.sentBy(epSrc).routedTo(epNoFwd.mac, epNoFwd.hostMAC))

			// Both connections' replies reach the client, each from
			// the address it connected to.
			rp := ctPkt{src: backend, dst: from, flags: "SA"}.sentBy(epNoFwd)
			ret, in, out = h.ctRun(t, progFromEP, devEP1, rp)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, ctPkt{src: vip2, dst: client, flags: "SA"}.sentBy(epNoFwd).routedTo(epSrc.mac, epSrc.hostMAC))
			rp = ctPkt{src: backend, dst: client, flags: "SA"}.sentBy(epNoFwd)
			ret, in, out = h.ctRun(t, progFromEP, devEP1, rp)
			wantVerdict(t, ret, actRedirect, in, out)
			want := rp
			if c.first.nat == CTNatDst {
				want = rp.translated(CTNatSrc, vip1)
			}
			wantFrame(t, out, want.routedTo(epSrc.mac, epSrc.hostMAC))
		})
	}
	t.Run("no free port", func(t *testing.T) {
		// Both ports of the range now carry a remapped flow to the
		// backend: a third clash is counted and goes to Linux.
		client := ap(epSrc.v4, 44002)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip1, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		ret, in, out = h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip2, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{ep0, passNATPorts, DirEgress})
		if _, ok := h.ctLookup(ctKeyOf(ctTCP, client, vip2)); ok {
			t.Errorf("flow without a free port was tracked")
		}
	})
	t.Run("clash ports, not the masquerade range", func(t *testing.T) {
		// The daemon remaps clashes within 1024-65535 (the client's
		// address is kept, so the node's own ports are no concern): a
		// wide range, where closed flows to a shared backend hold their
		// tuples for its TIME_WAIT. Here: masquerade 62000-62001 (full
		// of the flows above), clashes 30000-30003; hairpin stays on the
		// masquerade range.
		c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: lo, NatPortMax: hi,
			ClashPortMin: 30000, ClashPortMax: 30003, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16()}
		if err := h.objs.Config().Put(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		defer h.setNode(t, natPortMin, natPortMax)
		client := ap(epSrc.v4, 44004)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip1, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		ret, in, out = h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip2, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		h.wantBoth(t, ctTCP, client, vip2, backend, client.Addr(), 30000, 30003)
	})
	t.Run("a remapped flow reopened leaves its tuple taken", func(t *testing.T) {
		// The client's port, closed towards vip2 (remapped), opens a
		// new connection to vip2 (ct_reopens): a new flow, on another
		// remapped port; the old one's reply entry stays for the GC
		// (the backend's TIME_WAIT is on that tuple: ct_forget).
		c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: natPortMin, NatPortMax: natPortMax,
			ClashPortMin: 30010, ClashPortMax: 30013, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16()}
		if err := h.objs.Config().Put(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		defer h.setNode(t, natPortMin, natPortMax)
		client := ap(epSrc.v4, 44005)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip1, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		ret, in, out = h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip2, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		old := h.wantBoth(t, ctTCP, client, vip2, backend, client.Addr(), 30010, 30013)
		// The backend resets it: closed.
		rp := ctPkt{src: backend, dst: old, flags: "R"}.sentBy(epNoFwd)
		ret, in, out = h.ctRun(t, progFromEP, devEP1, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		if v, _ := h.ctLookup(ctKeyOf(ctTCP, client, vip2)); CTState(v.State) != ctStClosed {
			t.Fatalf("after the RST: state %d, want closed", v.State)
		}
		ret, in, out = h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip2, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		from := h.wantBoth(t, ctTCP, client, vip2, backend, client.Addr(), 30010, 30013)
		if from == old {
			t.Errorf("the reopened flow took the old flow's remapped source %v", old)
		}
		if v, _ := h.ctLookup(ctKeyOf(ctTCP, client, vip2)); CTState(v.State) != ctStNew || v.Packets != 1 {
			t.Errorf("reopened flow: state %d, %d packets; want new, 1", v.State, v.Packets)
		}
		if v, ok := h.ctLookup(ctKeyOf(ctTCP, backend, old)); !ok || v.Dir != uint8(CTDirReply) {
			t.Errorf("the old flow's reply entry (%v -> %v) is gone (%v, %+v): its tuple came free", backend, old, ok, v)
		}
	})
	t.Run("through a VIP, then to the backend directly", func(t *testing.T) {
		// The direct flow needs no NAT, but its reply tuple is the
		// VIP flow's: its source port is remapped (CT_NAT_SRC to the
		// client's own address), or the backend's replies would come
		// back as from the VIP.
		h.setNode(t, natPortMin, natPortMax)
		client := ap(epSrc.v4, 44003)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip1, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		p := ctPkt{src: client, dst: backend, flags: "S"}.sentBy(epSrc)
		ret, in, out = h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		h.wantMetrics(t, len(in), ctMetric{ep0, fwdPeer, DirEgress}, ctMetric{ep1, fwdPeer, DirIngress})
		v, ok := h.ctLookup(ctKeyOf(ctTCP, client, backend))
		from := ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
		if !ok || CTNat(v.Nat) != CTNatSrc || from.Addr() != client.Addr() || from.Port() < natPortMin {
			t.Fatalf("direct flow entry %+v (found %v), want snat to %v and a port of the range", v, ok, client.Addr())
		}
		f := ctFlow{src: client, dst: backend, nat: CTNatSrc, to: from}
		h.checkFlow(t, f, ctStNew, toTCPSyn)
		wantFrame(t, out, p.translated(CTNatSrc, from).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
		rp := f.reply("SA").sentBy(epNoFwd)
		ret, in, out = h.ctRun(t, progFromEP, devEP1, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, rp.translated(CTNatDst, client).routedTo(epSrc.mac, epSrc.hostMAC))
	})
}

// ---------------------------------------------------------------------------
// ICMP errors about translated flows.

// icmpErr is an ICMP or ICMPv6 error from src to dst quoting quote (an IP
// packet, cut to quoteLen bytes if nonzero). rest is the header's second
// word (the MTU of frag-needed / packet too big).
type icmpErr struct {
	src, dst       netip.Addr
	typ, code      uint8
	rest           uint32
	quote          ctPkt
	quoteLen       int
	ttl            uint8
	srcMAC, dstMAC net.HardwareAddr
}

func (e icmpErr) frame(tb testing.TB) []byte {
	tb.Helper()
	qp := e.quote
	qp.srcMAC, qp.dstMAC = gwMAC, upMAC // dropped: the quote starts at IP
	q := qp.frame(tb)[ethHdrLen:]
	if e.quoteLen > 0 {
		q = q[:e.quoteLen]
	}
	ttl := e.ttl
	if ttl == 0 {
		ttl = 64
	}
	restB := binary.BigEndian.AppendUint32(nil, e.rest)
	if e.src.Is4() {
		ip := &layers.IPv4{Version: 4, TTL: ttl, Id: 0x99, Protocol: ctICMP,
			SrcIP: e.src.AsSlice(), DstIP: e.dst.AsSlice()}
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(e.typ, e.code),
			Id: uint16(e.rest >> 16), Seq: uint16(e.rest)}
		return bpftest.Serialize(tb, &layers.Ethernet{SrcMAC: e.srcMAC, DstMAC: e.dstMAC, EthernetType: layers.EthernetTypeIPv4},
			ip, ic, gopacket.Payload(q))
	}
	ip := &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: ctICMP6,
		SrcIP: e.src.AsSlice(), DstIP: e.dst.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(e.typ, e.code)}
	ic.SetNetworkLayerForChecksum(ip)
	return bpftest.Serialize(tb, &layers.Ethernet{SrcMAC: e.srcMAC, DstMAC: e.dstMAC, EthernetType: layers.EthernetTypeIPv6},
		ip, ic, gopacket.Payload(append(restB, q...)))
}

func TestCTICMPErrors(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.setMasquerade(t, epSrc, true)
	h.publish(t, ctUDP, 5353, ap(epSrc.v4, 53))
	h.publish(t, ctUDP, 5353, ap(epSrc.v6, 53))
	vip := ap(addr("10.96.3.1"), 53)
	h.putService(t, testService{id: 61, vip: vip, proto: ctUDP, backends: []endpointPort{{epNoFwd, 5353}}})
	up, ep0, ep1 := h.links[devUp], h.links[devEP0], h.links[devEP1]
	router4, router6 := addr("203.0.113.254"), addr("2001:db8:203::fe")

	// masq opens a masqueraded flow from epSrc and returns its node port.
	masq := func(t *testing.T, proto layers.IPProtocol, src, dst netip.AddrPort) netip.AddrPort {
		t.Helper()
		ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: src, dst: dst, proto: proto, flags: "S"}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		v, ok := h.ctLookup(ctKeyOf(proto, src, dst))
		if !ok || CTNat(v.Nat) != CTNatSrc {
			t.Fatalf("flow %v -> %v not masqueraded", src, dst)
		}
		return ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
	}
	toEP0 := func(e icmpErr) icmpErr { e.srcMAC, e.dstMAC, e.ttl = epSrc.hostMAC, epSrc.mac, 63; return e }

	for _, c := range []struct {
		name      string
		proto     layers.IPProtocol
		client    netip.AddrPort
		remote    netip.AddrPort
		from      netip.Addr // the error's source: a router or the remote
		typ, code uint8
		rest      uint32
		quoteLen  int
		v6        bool
	}{
		{"ipv4/udp frag needed from a router", ctUDP, ap(epSrc.v4, 40000), ap(remoteV4, 53), router4, 3, 4, 1400, 0, false},
		{"ipv4/udp port unreachable from the remote", ctUDP, ap(epSrc.v4, 40001), ap(remoteV4, 53), remoteV4, 3, 3, 0, 0, false},
		{"ipv4/tcp time exceeded, 8-byte quote", ctTCP, ap(epSrc.v4, 40002), ap(remoteV4, 80), router4, 11, 0, 0, 28, false},
		{"ipv6/udp packet too big from a router", ctUDP, ap(epSrc.v6, 40000), ap(remoteV6, 53), router6, 2, 0, 1280, 0, true},
		{"ipv6/udp port unreachable from the remote", ctUDP, ap(epSrc.v6, 40001), ap(remoteV6, 53), remoteV6, 1, 4, 0, 0, true},
		{"ipv6/tcp time exceeded, 8-byte quote", ctTCP, ap(epSrc.v6, 40002), ap(remoteV6, 80), router6, 3, 0, 0, 48, true},
		{"ipv4/echo frag needed from a router", ctICMP, ap(epSrc.v4, 0x1234), ap(remoteV4, 0), router4, 3, 4, 1400, 0, false},
		{"ipv6/echo packet too big from a router", ctICMP6, ap(epSrc.v6, 0x1234), ap(remoteV6, 0), router6, 2, 0, 1280, 0, true},
	} {
		t.Run("masquerade/"+c.name, func(t *testing.T) {
			nat := masq(t, c.proto, c.client, c.remote)
			quote := ctPkt{src: nat, dst: c.remote, proto: c.proto, flags: "S", ttl: 63}
			e := icmpErr{src: c.from, dst: nat.Addr(), typ: c.typ, code: c.code, rest: c.rest,
				quote: quote, quoteLen: c.quoteLen, srcMAC: gwMAC, dstMAC: upMAC}
			want := e
			want.dst = c.client.Addr()
			want.quote.src = c.client
			h.icmpForwarded(t, progFromUplink, devUp, e, toEP0(want),
				ctMetric{up, fwdPeer, DirIngress}, ctMetric{ep0, fwdPeer, DirIngress})
		})
	}

	t.Run("masquerade/ipv6/quote with extension headers", func(t *testing.T) { extICMPError(t, h) })

	for _, v6 := range []bool{false, true} {
		name, remote, node, target, typ, code := "ipv4", ap(remoteV4, 33000), nodeV4, ap(epSrc.v4, 53), uint8(3), uint8(3)
		if v6 {
			name, remote, node, target, typ, code = "ipv6", ap(remoteV6, 33000), nodeV6, ap(epSrc.v6, 53), 1, 4
		}
		t.Run("published port/"+name+"/port unreachable from the container", func(t *testing.T) {
			ret, in, out := h.ctRun(t, progFromUplink, devUp, ctPkt{src: remote, dst: ap(node, 5353), proto: ctUDP}.fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			// The container's stack quotes what it got: remote -> itself.
			quote := ctPkt{src: remote, dst: target, proto: ctUDP, ttl: 63}
			e := icmpErr{src: target.Addr(), dst: remote.Addr(), typ: typ, code: code, quote: quote,
				srcMAC: epSrc.mac, dstMAC: epSrc.hostMAC}
			want := e
			want.src, want.quote.dst = node, ap(node, 5353)
			want.srcMAC, want.dstMAC, want.ttl = upMAC, gwMAC, 63
			h.icmpForwarded(t, progFromEP, devEP0, e, want, ctMetric{ep0, fwdFIB, DirEgress})
		})
	}

	t.Run("service/ipv4/port unreachable from the backend", func(t *testing.T) {
		client, backend := ap(epSrc.v4, 41000), ap(epNoFwd.v4, 5353)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: vip, proto: ctUDP}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		quote := ctPkt{src: client, dst: backend, proto: ctUDP, ttl: 63}
		e := icmpErr{src: backend.Addr(), dst: client.Addr(), typ: 3, code: 3, quote: quote,
			srcMAC: epNoFwd.mac, dstMAC: epNoFwd.hostMAC}
		want := e
		want.src, want.quote.dst = vip.Addr(), vip
		h.icmpForwarded(t, progFromEP, devEP1, e, toEP0(want), ctMetric{ep1, fwdPeer, DirEgress}, ctMetric{ep0, fwdPeer, DirIngress})
	})

	t.Run("hairpin/ipv4/port unreachable from the container itself", func(t *testing.T) {
		h.publish(t, ctUDP, 5454, ap(epSrc.v4, 54))
		client := ap(epSrc.v4, 42000)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: ap(nodeV4, 5454), proto: ctUDP}.sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		from := h.wantBoth(t, ctUDP, client, ap(nodeV4, 5454), ap(epSrc.v4, 54), nodeV4, natPortMin, natPortMax)
		quote := ctPkt{src: from, dst: ap(epSrc.v4, 54), proto: ctUDP, ttl: 63}
		e := icmpErr{src: epSrc.v4, dst: from.Addr(), typ: 3, code: 3, quote: quote, srcMAC: epSrc.mac, dstMAC: epSrc.hostMAC}
		want := e
		want.src, want.dst = nodeV4, epSrc.v4
		want.quote.src, want.quote.dst = client, ap(nodeV4, 5454)
		h.icmpForwarded(t, progFromEP, devEP0, e, toEP0(want), ctMetric{ep0, fwdPeer, DirEgress}, ctMetric{ep0, fwdPeer, DirIngress})
	})

	t.Run("error about no flow passes", func(t *testing.T) {
		quote := ctPkt{src: ap(nodeV4, 61999), dst: ap(remoteV4, 53), proto: ctUDP, ttl: 63}
		e := icmpErr{src: router4, dst: nodeV4, typ: 3, code: 4, rest: 1400, quote: quote, srcMAC: gwMAC, dstMAC: upMAC}
		in := e.frame(t)
		h.resetMetrics(t)
		ret, out, err := h.runProg(h.objs.TCFromUplink(), in, up)
		if err != nil {
			t.Fatal(err)
		}
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{up, passNotFwded, DirIngress})
	})
}

// TestCTHalfFlow: a flow one of whose entries is gone (the GC read it
// expired just before a packet revived the flow: a client reusing its
// port) or belongs to another flow since is forgotten and started over,
// not left half-translated.
func TestCTHalfFlow(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	be := []endpointPort{{epNoFwd, 8080}}
	vip := ap(addr("10.96.3.1"), 80)
	h.putService(t, testService{id: 51, vip: vip, proto: ctTCP, backends: be})
	backend := ap(epNoFwd.v4, 8080)
	f := ctFlow{src: ap(epSrc.v4, 45000), dst: vip, nat: CTNatDst, to: backend}
	syn := func(t *testing.T) {
		t.Helper()
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.translated(CTNatDst, backend).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
	}
	syn(t)
	h.checkFlow(t, f, ctStNew, toTCPSyn)

	t.Run("reply entry deleted", func(t *testing.T) {
		if err := h.objs.CT().Delete(f.replyKey()); err != nil {
			t.Fatal(err)
		}
		syn(t)
		h.checkFlow(t, f, ctStNew, toTCPSyn) // both entries again
		// and the backend's answer is translated back
		rp := f.reply("SA").sentBy(epNoFwd)
		ret, in, out := h.ctRun(t, progFromEP, devEP1, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, rp.translated(CTNatSrc, vip).routedTo(epSrc.mac, epSrc.hostMAC))
		h.checkFlow(t, f, ctStEst, toTCPEst)
	})
	t.Run("reply key taken by another flow", func(t *testing.T) {
		// An untranslated flow backend -> client now owns the key the
		// reply entry had: the client's next SYN starts over and, the
		// reply tuple being taken, gets its source port remapped.
		other := CTVal{Dir: uint8(tcCtDirCT_DIR_ORIG), Nat: uint8(CTNatNone), Expires: uint64(ctNow()) + uint64(time.Minute)}
		if err := h.objs.CT().Put(f.replyKey(), &other); err != nil {
			t.Fatal(err)
		}
		if err := h.objs.CTWritten(); err != nil {
			t.Fatal(err)
		}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		from := h.wantBoth(t, ctTCP, f.src, vip, backend, f.src.Addr(), natPortMin, natPortMax)
		wantFrame(t, out, ctPkt{src: from, dst: backend, flags: "S"}.sentBy(epSrc).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
		if v, ok := h.ctLookup(f.replyKey()); !ok || v.Dir != other.Dir || CTNat(v.Nat) != CTNatNone {
			t.Errorf("the other flow's entry was changed: %+v (found %v)", v, ok)
		}
	})
	t.Run("original entry deleted, reply from the backend", func(t *testing.T) {
		g := ctFlow{src: ap(epSrc.v4, 45001), dst: vip, nat: CTNatDst, to: backend}
		p := g.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		if err := h.objs.CT().Delete(g.origKey()); err != nil {
			t.Fatal(err)
		}
		// The orphaned reply entry is dropped, not used: the answer
		// goes untranslated (the client's kernel resets it and its
		// SYN, sent again, starts a whole flow).
		rp := g.reply("SA").sentBy(epNoFwd)
		ret, in, out = h.ctRun(t, progFromEP, devEP1, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, rp.routedTo(epSrc.mac, epSrc.hostMAC))
		if v, ok := h.ctLookup(g.replyKey()); ok && CTNat(v.Nat) != CTNatNone {
			t.Errorf("orphaned reply entry still translates: %+v", v)
		}
	})
}

// icmpForwarded sends the ICMP error e in on dev through prog and checks
// that it leaves redirected as want, with checksums right and metrics
// counted.
func (h *harness) icmpForwarded(t *testing.T, prog ctProg, dev string, e, want icmpErr, metrics ...ctMetric) {
	t.Helper()
	ret, in, out := h.ctRunFrame(t, prog, dev, e.frame(t))
	wantVerdict(t, ret, actRedirect, in, out)
	if err := ctChecksums(out); err != nil {
		t.Errorf("output: %v", err)
	}
	if w := want.frame(t); string(out) != string(w) {
		t.Errorf("output differs from the expected error %v -> %v: %s", want.src, want.dst, frameDiff(out, w))
	}
	h.wantMetrics(t, len(in), metrics...)
}
