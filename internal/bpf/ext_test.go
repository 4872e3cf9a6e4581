package bpf

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// IPv6 extension headers through conntrack and NAT: lib/l4.h's parse_l4
// finds the transport header behind them for every stage, and
// lib/icmp_quote.h the quoted one of an ICMP error.

const (
	extHopByHop = 0
	extRouting  = 43
	extFragment = 44
	extDstOpts  = 60
)

// withExts splices 8-byte IPv6 extension headers of the given types
// between frame's IPv6 header and its payload: options headers carry a
// PadN, a routing header segments left 0, a fragment header offset 0 and
// no M flag (RFC 6946's atomic fragment). Transport checksums stay right:
// their pseudo-header counts the upper-layer length.
func withExts(frame []byte, exts ...uint8) []byte {
	l3 := ethHdrLen
	var hdrs []byte
	for i, t := range exts {
		next := frame[l3+6]
		if i+1 < len(exts) {
			next = exts[i+1]
		}
		h := []byte{next, 0, 1, 4, 0, 0, 0, 0}
		switch t {
		case extRouting:
			h = []byte{next, 0, 4, 0, 0, 0, 0, 0}
		case extFragment:
			h = []byte{next, 0, 0, 0, 0, 0, 0, 9}
		}
		hdrs = append(hdrs, h...)
	}
	out := append(bytes.Clone(frame[:l3+40]), hdrs...)
	out = append(out, frame[l3+40:]...)
	out[l3+6] = exts[0]
	binary.BigEndian.PutUint16(out[l3+4:], binary.BigEndian.Uint16(frame[l3+4:])+uint16(len(hdrs)))
	return out
}

// extPublished (TestCTPublish's): a published port's TCP SYN behind a
// hop-by-hop and a destination-options header is DNATed and tracked, its
// reply (behind routing and destination options) translated back.
func extPublished(t *testing.T, h *harness) {
	ep0, ep1 := h.links[devEP0], h.links[devEP1]
	f := ctFlow{proto: ctTCP, src: ap(epSrc.v6, 40010), dst: ap(nodeV6, 8080), nat: CTNatDst, to: ap(epNoFwd.v6, 80)}
	p := f.orig("S").sentBy(epSrc)
	p.exts = []uint8{extHopByHop, extDstOpts}
	ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
	wantVerdict(t, ret, actRedirect, in, out)
	wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
	h.wantMetrics(t, len(in), ctMetric{ep0, fwdPeer, DirEgress}, ctMetric{ep1, fwdPeer, DirIngress})
	h.checkFlow(t, f, ctStNew, toTCPSyn)

	rp := f.reply("SA").sentBy(epNoFwd)
	rp.exts = []uint8{extRouting, extDstOpts}
	ret, in, out = h.ctRun(t, progFromEP, devEP1, rp)
	wantVerdict(t, ret, actRedirect, in, out)
	wantFrame(t, out, rp.translated(CTNatSrc, f.dst).routedTo(epSrc.mac, epSrc.hostMAC))
	h.checkFlow(t, f, ctStEst, toTCPEst)
}

// extICMPError (TestCTICMPErrors's, epSrc masquerading): an ICMP error
// quoting a masqueraded packet with extension headers is translated as
// its flow, quote included.
func extICMPError(t *testing.T, h *harness) {
	ep0, up := h.links[devEP0], h.links[devUp]
	client, remote := ap(epSrc.v6, 40100), ap(remoteV6, 53)
	ret, in, out := h.ctRun(t, progFromEP, devEP0, ctPkt{src: client, dst: remote, proto: ctUDP}.sentBy(epSrc))
	wantVerdict(t, ret, actRedirect, in, out)
	v, ok := h.ctLookup(ctKeyOf(ctUDP, client, remote))
	if !ok || CTNat(v.Nat) != CTNatSrc {
		t.Fatalf("flow %v -> %v not masqueraded", client, remote)
	}
	nat := ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
	quote := ctPkt{src: nat, dst: remote, proto: ctUDP, ttl: 63, exts: []uint8{extHopByHop, extDstOpts}}
	e := icmpErr{src: addr("2001:db8:203::fe"), dst: nat.Addr(), typ: 1, code: 4,
		quote: quote, srcMAC: gwMAC, dstMAC: upMAC}
	want := e
	want.dst, want.quote.src = client.Addr(), client
	want.srcMAC, want.dstMAC, want.ttl = epSrc.hostMAC, epSrc.mac, 63
	in = e.frame(t)
	h.resetMetrics(t)
	r, out, err := h.runProg(h.objs.TCFromUplink(), in, up)
	if err != nil {
		t.Fatal(err)
	}
	wantVerdict(t, r, actRedirect, in, out)
	if err := ctChecksums(out); err != nil {
		t.Errorf("output: %v", err)
	}
	if w := want.frame(t); !bytes.Equal(out, w) {
		t.Errorf("output differs from the expected error: %s", frameDiff(out, w))
	}
	h.wantMetrics(t, len(in), ctMetric{up, fwdPeer, DirIngress}, ctMetric{ep0, fwdPeer, DirIngress})
}
