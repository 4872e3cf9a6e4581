package bpf

import (
	"net/netip"
	"testing"
	"time"
)

// Masquerade (lib/ct_nat.h, lib/nat.h: the SNAT of the conntrack stage),
// on the conntrack harness of ct_test.go.

// ---------------------------------------------------------------------------
// Masquerade: epSrc's flows out of the uplink leave from the node's address
// and a port of the range; replies come back through xlane_from_uplink.

func TestCTMasquerade(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.setMasquerade(t, epSrc, true)
	cases := []struct {
		name      string
		f         ctFlow
		first     time.Duration
		est       time.Duration
		node      netip.Addr
		unchanged bool // no gateway MAC: bpf_redirect_neigh fills L2
	}{
		{"ipv4/tcp", ctFlow{proto: ctTCP, src: ap(epSrc.v4, 40000), dst: ap(remoteV4, 80)}, toTCPSyn, toTCPEst, nodeV4, false},
		{"ipv4/udp", ctFlow{proto: ctUDP, src: ap(epSrc.v4, 40000), dst: ap(remoteV4, 53)}, toUDP, toUDPEst, nodeV4, false},
		{"ipv4/icmp echo", ctFlow{proto: ctICMP, src: ap(epSrc.v4, 0x1234), dst: ap(remoteV4, 0)}, toICMP, toICMP, nodeV4, false},
		{"ipv6/tcp", ctFlow{proto: ctTCP, src: ap(epSrc.v6, 40000), dst: ap(remoteV6, 80)}, toTCPSyn, toTCPEst, nodeV6, false},
		{"ipv6/udp", ctFlow{proto: ctUDP, src: ap(epSrc.v6, 40000), dst: ap(remoteV6, 53)}, toUDP, toUDPEst, nodeV6, false},
		{"ipv6/icmp echo", ctFlow{proto: ctICMP6, src: ap(epSrc.v6, 0x1234), dst: ap(remoteV6, 0)}, toICMP, toICMP, nodeV6, false},
		{"ipv4/tcp on-link, neighbour unresolved", ctFlow{proto: ctTCP, src: ap(epSrc.v4, 40001), dst: ap(addr("198.51.100.77"), 80)}, toTCPSyn, toTCPEst, nodeV4, true},
		{"ipv6/tcp on-link, neighbour unresolved", ctFlow{proto: ctTCP, src: ap(epSrc.v6, 40001), dst: ap(addr("2001:db8:100::77"), 80)}, toTCPSyn, toTCPEst, nodeV6, true},
	}
	for _, c := range cases {
		f := c.f
		t.Run(c.name+"/out", func(t *testing.T) {
			p := f.orig("S").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			v, ok := h.ctLookup(f.origKey())
			if !ok {
				t.Fatalf("no entry for %v", f.origKey())
			}
			f.nat, f.to = CTNatSrc, ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
			if f.to.Addr() != c.node || f.to.Port() < natPortMin || f.to.Port() > natPortMax {
				t.Errorf("masqueraded to %v, want %v and a port in %d-%d", f.to, c.node, natPortMin, natPortMax)
			}
			want := p.translated(CTNatSrc, f.to)
			if c.unchanged {
				want = want.routedTo(p.dstMAC, p.srcMAC)
				h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdNeigh, DirEgress})
			} else {
				want = want.routedTo(gwMAC, upMAC)
				h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
			}
			wantFrame(t, out, want)
			h.checkFlow(t, f, ctStNew, c.first)

			t.Run("reply through the uplink", func(t *testing.T) {
				rp := f.reply("SA").fromOutside()
				ret, in, out := h.ctRun(t, progFromUplink, devUp, rp)
				wantVerdict(t, ret, actRedirect, in, out)
				wantFrame(t, out, rp.translated(CTNatDst, f.src).routedTo(epSrc.mac, epSrc.hostMAC))
				h.wantMetrics(t, len(in), ctMetric{h.links[devUp], fwdPeer, DirIngress}, ctMetric{h.links[devEP0], fwdPeer, DirIngress})
				h.checkFlow(t, f, ctStEst, c.est)
			})
			t.Run("next packet keeps the port", func(t *testing.T) {
				p := f.orig("A").sentBy(epSrc)
				ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
				wantVerdict(t, ret, actRedirect, in, out)
				want := p.translated(CTNatSrc, f.to)
				if c.unchanged {
					want = want.routedTo(p.dstMAC, p.srcMAC)
				} else {
					want = want.routedTo(gwMAC, upMAC)
				}
				wantFrame(t, out, want)
				h.checkFlow(t, f, ctStEst, c.est)
			})
		})
	}

	t.Run("not masquerading", func(t *testing.T) {
		h.setMasquerade(t, epSrc, false)
		defer h.setMasquerade(t, epSrc, true)
		f := ctFlow{src: ap(epSrc.v4, 40100), dst: ap(remoteV4, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(gwMAC, upMAC))
		h.checkFlow(t, f, ctStNew, toTCPSyn)
	})
	t.Run("to a local endpoint", func(t *testing.T) {
		f := ctFlow{src: ap(epSrc.v4, 40101), dst: ap(epPeer.v4, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(epPeer.mac, epPeer.hostMAC))
		h.checkFlow(t, f, ctStNew, toTCPSyn)
	})
	t.Run("ports are per destination", func(t *testing.T) {
		// Two ports: a third flow to the same destination finds none free
		// (pass_nat_ports, to Linux unchanged); another destination
		// reuses them.
		h.setNode(t, 62000, 62001)
		defer h.setNode(t, natPortMin, natPortMax)
		used := map[uint16]bool{}
		for i := range 2 {
			f := ctFlow{src: ap(epSrc.v4, uint16(40200+i)), dst: ap(remoteV4, 443)}
			ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
			wantVerdict(t, ret, actRedirect, in, out)
			v, ok := h.ctLookup(f.origKey())
			if !ok {
				t.Fatalf("flow %d not tracked", i)
			}
			used[nbo(v.NatPort)] = true
		}
		if !used[62000] || !used[62001] {
			t.Errorf("two flows got ports %v, want 62000 and 62001", used)
		}
		f := ctFlow{src: ap(epSrc.v4, 40202), dst: ap(remoteV4, 443)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], passNATPorts, DirEgress})
		if _, ok := h.ctLookup(f.origKey()); ok {
			t.Errorf("flow without a port was tracked")
		}
		f = ctFlow{src: ap(epSrc.v4, 40202), dst: ap(remoteV4, 8443)}
		ret, in, out = h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
	})
	t.Run("a closed flow reopened takes another port", func(t *testing.T) {
		// The container's port, closed (RST from outside), opens a new
		// connection to the same destination (ct_reopens): a new flow,
		// masqueraded anew; the old flow's reply entry stays for the GC,
		// keeping its port off new flows (the server's TIME_WAIT is on
		// that tuple: ct_forget).
		f := ctFlow{src: ap(epSrc.v4, 40300), dst: ap(remoteV4, 80)}
		port := func() netip.AddrPort {
			t.Helper()
			ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
			wantVerdict(t, ret, actRedirect, in, out)
			v, ok := h.ctLookup(f.origKey())
			if !ok || CTNat(v.Nat) != CTNatSrc || v.Packets != 1 || CTState(v.State) != ctStNew {
				t.Fatalf("entry %+v (found %v): want a new SNAT flow of one packet", v, ok)
			}
			return ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
		}
		old := port()
		rp := ctPkt{src: f.dst, dst: old, flags: "R"}.fromOutside()
		ret, in, out := h.ctRun(t, progFromUplink, devUp, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		if v, _ := h.ctLookup(f.origKey()); CTState(v.State) != ctStClosed {
			t.Fatalf("after the RST: state %d, want closed", v.State)
		}
		if now := port(); now == old {
			t.Errorf("the reopened flow took the old flow's port %v", old)
		}
		if v, ok := h.ctLookup(ctKeyOf(ctTCP, f.dst, old)); !ok || v.Dir != uint8(CTDirReply) {
			t.Errorf("the old flow's reply entry (%v -> %v) is gone (%v): its port came free", f.dst, old, ok)
		}
	})
	t.Run("uplink packet of no flow", func(t *testing.T) {
		p := ctPkt{src: ap(remoteV4, 80), dst: ap(nodeV4, 61234), flags: "SA"}.fromOutside()
		ret, in, out := h.ctRun(t, progFromUplink, devUp, p)
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devUp], passNotFwded, DirIngress})
	})
}
