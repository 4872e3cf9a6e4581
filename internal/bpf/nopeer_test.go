package bpf

import (
	"net/netip"
	"testing"
)

// setEPFlag sets or clears flag on both of ep's entries.
func (h *harness) setEPFlag(tb testing.TB, ep endpoint, flag uint16, on bool) {
	tb.Helper()
	for _, a := range []netip.Addr{ep.v4, ep.v6} {
		var v EndpointVal
		k := KeyFromAddr(a)
		if err := h.objs.Endpoints().Lookup(&k, &v); err != nil {
			tb.Fatal(err)
		}
		v.Flags &^= flag
		if on {
			v.Flags |= flag
		}
		if err := h.objs.Endpoints().Put(&k, &v); err != nil {
			tb.Fatal(err)
		}
	}
}

// An endpoint without a peer (a VM's tap, XL_EP_NO_PEER) is reached by
// bpf_redirect to its device's egress, whose tcx program counts the
// delivery: the sending program must not count it for the destination as
// it does for a peer redirect (which skips that egress), or every packet
// into a VM would count twice. Same frames either way.
//
//	epSrc --from_endpoint--> epPeer (tap)        counted once, at epSrc
//	outside --from_uplink (reverse NAT)--> epSrc (tap)   counted once, at up
func TestNoPeerEndpoint(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	ep0, up := h.links[devEP0], h.links[devUp]

	t.Run("endpoint to a tap", func(t *testing.T) {
		for _, noPeer := range []bool{false, true} {
			h.setEPFlag(t, epPeer, EPFlagNoPeer, noPeer)
			f := ctFlow{src: ap(epSrc.v4, 40200), dst: ap(epPeer.v4, 80)}
			if noPeer {
				f.src = ap(epSrc.v4, 40201)
			}
			p := f.orig("S").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.routedTo(epPeer.mac, epPeer.hostMAC))
			want := []ctMetric{{ep0, fwdPeer, DirEgress}, {epPeer.ifindex, fwdPeer, DirIngress}}
			if noPeer {
				want = want[:1]
			}
			h.wantMetrics(t, len(in), want...)
		}
		h.setEPFlag(t, epPeer, EPFlagNoPeer, false)
	})

	t.Run("masqueraded reply from the uplink into a tap", func(t *testing.T) {
		h.setMasquerade(t, epSrc, true)
		h.setEPFlag(t, epSrc, EPFlagNoPeer, true)
		defer h.setEPFlag(t, epSrc, EPFlagNoPeer, false)
		f := ctFlow{proto: ctTCP, src: ap(epSrc.v4, 40202), dst: ap(remoteV4, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		v, ok := h.ctLookup(f.origKey())
		if !ok {
			t.Fatalf("no entry for %v", f.origKey())
		}
		f.nat, f.to = CTNatSrc, ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
		rp := f.reply("SA").fromOutside()
		ret, in, out = h.ctRun(t, progFromUplink, devUp, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, rp.translated(CTNatDst, f.src).routedTo(epSrc.mac, epSrc.hostMAC))
		h.wantMetrics(t, len(in), ctMetric{up, fwdPeer, DirIngress})
	})
}
