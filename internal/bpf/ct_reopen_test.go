package bpf

import (
	"fmt"
	"testing"
)

// TestCTServiceReopen: a client that reuses its port for a new connection
// to a VIP (a bare SYN on the tuple of a closing or closed flow, ct_reopens)
// starts a new flow: a backend chosen from the service's table as it is
// now, a service deleted since no longer translating, as Linux's conntrack
// kills a TIME_WAIT or CLOSE entry on such a SYN. A flow not yet finished
// keeps its backend (a retransmitted SYN, a SYN on an established flow), and
// so do the finished flow's other packets. Both families, from a container
// (xlane_from_endpoint) and from outside (xlane_from_uplink).
//
//	client epSrc:45xxx ──SYN──▶ VIP ──▶ backend 0 epNoFwd:8080   (the old flow)
//	          (FIN/RST: closed)
//	client epSrc:45xxx ──SYN──▶ VIP ──▶ backend 1 epLo:8081      (table moved)
//	                            VIP ──▶ (service deleted: no translation)
func TestCTServiceReopen(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	backends := []endpointPort{{epNoFwd, 8080}, {epLo, 8081}}
	all := func(i uint32) []uint32 {
		s := make([]uint32, DefaultMaglevSize)
		for j := range s {
			s[j] = i
		}
		return s
	}
	type step struct {
		reply bool
		flags string
	}
	o := func(flags string) step { return step{false, flags} }
	r := func(flags string) step { return step{true, flags} }
	finishes := []struct {
		name    string
		steps   []step
		outside bool // from outside: no replies here (they leave through Linux)
		reopens bool
		state   CTState // after the steps, when not reopened
	}{
		{"FIN both ways", []step{o("S"), r("SA"), o("A"), r("FA"), o("FA")}, false, true, 0},
		{"FIN from the backend only", []step{o("S"), r("SA"), r("FA")}, false, true, 0},
		{"RST from the backend", []step{o("S"), r("R")}, false, true, 0},
		{"RST from the client, from outside", []step{o("S"), o("R")}, true, true, 0},
		{"FIN from the client, from outside", []step{o("S"), o("FA")}, true, true, 0},
		{"SYN retransmitted: not finished", []step{o("S")}, false, false, ctStNew},
		{"SYN on an established flow", []step{o("S"), r("SA")}, false, false, ctStEst},
		{"SYN from outside, not finished", []step{o("S")}, true, false, ctStNew},
	}
	for fi, fin := range finishes {
		for _, fam := range []string{"ipv4", "ipv6"} {
			for _, change := range []string{"backend moved", "service deleted"} {
				v4 := fam == "ipv4"
				id := uint32(300 + fi)
				vip := ap(addr("10.96.30.1"), 80)
				src := ap(epSrc.v4, uint16(45000+fi))
				if !v4 {
					vip, src = ap(addr("fd00:96::30:1"), 80), ap(epSrc.v6, uint16(45000+fi))
				}
				if fin.outside {
					src = ap(remoteV4, src.Port())
					if !v4 {
						src = ap(remoteV6, src.Port())
					}
				}
				name := fmt.Sprintf("%s/%s/%s", fam, fin.name, change)
				t.Run(name, func(t *testing.T) {
					h.ctFlush(t)
					h.putService(t, testService{id: id, vip: vip, proto: ctTCP, backends: backends, slots: all(0)})
					f := ctFlow{src: src, dst: vip, nat: CTNatDst, to: backends[0].addr(v4)}
					send := func(s step) (int32, []byte, []byte, ctPkt) {
						t.Helper()
						if s.reply {
							p := f.reply(s.flags).sentBy(epNoFwd)
							ret, in, out := h.ctRun(t, progFromEP, devEP1, p)
							return ret, in, out, p
						}
						if fin.outside {
							p := f.orig(s.flags).fromOutside()
							ret, in, out := h.ctRun(t, progFromUplink, devUp, p)
							return ret, in, out, p
						}
						p := f.orig(s.flags).sentBy(epSrc)
						ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
						return ret, in, out, p
					}
					for _, s := range fin.steps {
						ret, in, out, p := send(s)
						wantVerdict(t, ret, actRedirect, in, out)
						if s.reply {
							wantFrame(t, out, p.translated(CTNatSrc, vip).routedTo(epSrc.mac, epSrc.hostMAC))
						} else {
							wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
						}
					}
					if t.Failed() {
						t.FailNow()
					}
					old := f
					switch change {
					case "backend moved":
						h.putMaglev(t, id, all(1))
					case "service deleted":
						k := ServiceKey{Addr: vip.Addr().As16(), Port: nbo(vip.Port()), Proto: uint8(ctTCP)}
						if err := h.objs.Services().Delete(&k); err != nil {
							t.Fatal(err)
						}
					}
					ret, in, out, p := send(o("S"))
					switch {
					case !fin.reopens:
						// The same connection: the old flow's backend, whatever
						// the service became.
						wantVerdict(t, ret, actRedirect, in, out)
						wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
						to := toTCPSyn
						if fin.state == ctStEst {
							to = toTCPEst
						}
						h.checkFlow(t, f, fin.state, to)
					case change == "backend moved":
						f.to = backends[1].addr(v4)
						wantVerdict(t, ret, actRedirect, in, out)
						wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epLo.mac, epLo.hostMAC))
						orig, _ := h.checkFlow(t, f, ctStNew, toTCPSyn)
						if orig.Packets != 1 {
							t.Errorf("the new flow's entry counts %d packets, want 1 (its SYN): the old entry was kept", orig.Packets)
						}
						if v, ok := h.ctLookup(old.replyKey()); ok {
							t.Errorf("the old flow's reply entry %v is left: %+v", old.replyKey(), v)
						}
						// The new backend's answer leaves as the VIP's
						// (epLo answers through Linux: not run here).
					default: // service deleted: no translation, no entries of it
						// Not forwarded: Linux gets it (no route to the
						// VIP here; on a node, an ICMP unreachable).
						wantVerdict(t, ret, actPass, in, out)
						if v, ok := h.ctLookup(f.origKey()); ok && CTNat(v.Nat) != CTNatNone {
							t.Errorf("the SYN's entry still translates to the deleted service's backend: %+v", v)
						}
						if v, ok := h.ctLookup(old.replyKey()); ok {
							t.Errorf("the old flow's reply entry %v is left: %+v", old.replyKey(), v)
						}
					}
				})
			}
		}
	}
}
