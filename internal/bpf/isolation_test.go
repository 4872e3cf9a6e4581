package bpf

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
)

// Tests for the network policy between local endpoints (ep_apart in
// bpf/lib/endpoint.h): ICC off (XL_EP_NO_ICC) keeps a network's endpoints
// apart, an isolated network (XL_EP_ISOLATED) keeps its endpoints and those
// of other networks apart; the node, the outside and everything else are
// unaffected. Checked in the tc from-endpoint program, the XDP programs
// (native and generic), the tcx egress program (what Linux delivers) and
// netkit's two programs.

const (
	dropICC      = tcXlReasonXL_DROP_ICC
	dropIsolated = tcXlReasonXL_DROP_ISOLATED
	deliver      = tcXlReasonXL_DELIVER
)

// setPolicy rewrites ep's entries in xlane_endpoints with a network id and
// policy flags, keeping everything else.
func (h *harness) setPolicy(tb testing.TB, ep endpoint, netID uint32, flags uint16) {
	tb.Helper()
	for _, a := range []netip.Addr{ep.v4, ep.v6} {
		var v EndpointVal
		if err := h.objs.Endpoints().Lookup(KeyFromAddr(a), &v); err != nil {
			tb.Fatalf("endpoint %s: %v", a, err)
		}
		v.NetworkId = netID
		v.Flags = v.Flags&^(EPFlagNoICC|EPFlagIsolated|EPFlagAllowUnsolicited) | flags
		if err := h.objs.Endpoints().Put(KeyFromAddr(a), v); err != nil {
			tb.Fatalf("endpoint %s: %v", a, err)
		}
	}
}

// policy is one arrangement of epSrc's and the peer's networks.
type policy struct {
	name               string
	srcNet, peerNet    uint32
	srcFlags, peerFlag uint16
	apart              Reason // 0: they reach each other
}

var policies = []policy{
	{"same network, icc on", 1, 1, 0, 0, 0},
	{"same network, icc off", 1, 1, EPFlagNoICC, EPFlagNoICC, dropICC},
	{"same network, icc off and isolated", 1, 1, EPFlagNoICC | EPFlagIsolated, EPFlagNoICC | EPFlagIsolated, dropICC},
	{"same network, isolated", 1, 1, EPFlagIsolated, EPFlagIsolated, 0},
	{"other network, neither isolated", 1, 2, 0, 0, 0},
	{"other network, icc off only", 1, 2, EPFlagNoICC, 0, 0},
	{"other network, sender isolated", 1, 2, EPFlagIsolated, 0, dropIsolated},
	{"other network, receiver isolated", 1, 2, 0, EPFlagIsolated, dropIsolated},
	{"other network, both isolated", 1, 2, EPFlagIsolated, EPFlagIsolated, dropIsolated},
}

// policyFrames are epSrc's frames to its peer (to the address given) in
// every protocol.
func policyFrames(tb testing.TB, v4, v6 netip.Addr) map[string][]byte {
	return map[string][]byte{
		"ipv4/tcp":  pktSpec{src: epSrc.v4, dst: v4}.frame(tb),
		"ipv4/udp":  pktSpec{src: epSrc.v4, dst: v4, proto: layers.IPProtocolUDP}.frame(tb),
		"ipv4/icmp": pktSpec{src: epSrc.v4, dst: v4, proto: layers.IPProtocolICMPv4}.frame(tb),
		"ipv6/tcp":  pktSpec{src: epSrc.v6, dst: v6}.frame(tb),
		"ipv6/icmp": pktSpec{src: epSrc.v6, dst: v6, proto: layers.IPProtocolICMPv6}.frame(tb),
	}
}

// notApart are epSrc's frames the policy never touches: to the node, to
// the outside, to no endpoint. The harness's FIB decides them.
func notApart(tb testing.TB) []verdictCase {
	return []verdictCase{
		{"ipv4/node address", devEP0, tcp4(tb, addr("198.51.100.1")), passed(passNotFwded)},
		{"ipv6/node address", devEP0, tcp6(tb, addr("2001:db8:100::1")), passed(passNotFwded)},
		{"ipv4/outside", devEP0, tcp4(tb, addr("203.0.113.9")), routed(fwdFIB, gwMAC, upMAC)},
		{"ipv6/outside", devEP0, tcp6(tb, addr("2001:db8:203::9")), routed(fwdFIB, gwMAC, upMAC)},
		{"ipv4/link scope", devEP0, pktSpec{src: epSrc.v4, dst: addr("255.255.255.255"), proto: layers.IPProtocolUDP}.frame(tb), passed(passLinkLocal)},
	}
}

func TestFromEndpointPolicy(t *testing.T) {
	h := newHarness(t)
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			h.setPolicy(t, epSrc, pol.srcNet, pol.srcFlags)
			h.setPolicy(t, epPeer, pol.peerNet, pol.peerFlag)
			frames := policyFrames(t, epPeer.v4, epPeer.v6)
			for _, name := range sortedKeys(frames) {
				w := toPeer(epPeer)
				if pol.apart != 0 {
					w = dropped(pol.apart)
				}
				t.Run(name, func(t *testing.T) { h.check(t, h.links[devEP0], frames[name], w) })
			}
			for _, c := range notApart(t) {
				t.Run(c.name, func(t *testing.T) { h.check(t, h.links[c.dev], c.frame, c.want) })
			}
		})
	}
}

func TestXDPFromEndpointPolicy(t *testing.T) {
	h := newXDPHarness(t)
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			h.setPolicy(t, epSrc, pol.srcNet, pol.srcFlags)
			h.setPolicy(t, xdpPeer, pol.peerNet, pol.peerFlag)
			frames := policyFrames(t, xdpPeer.v4, xdpPeer.v6)
			var cases []xdpCase
			for _, name := range sortedKeys(frames) {
				w := h.xdpToPeer(xdpPeer)
				if pol.apart != 0 {
					w = want{ret: xdpDrop, reason: pol.apart}
				}
				// UDP and TCP to a peer: the native program completes the
				// checksum, which the test frames already carry.
				cases = append(cases, both(name, devEP0, frames[name], w))
			}
			for _, c := range notApart(t) {
				cases = append(cases, both(c.name, c.dev, c.frame, h.xdpWantFromTC(c.want)))
			}
			runXDPCases(t, h, cases)
		})
	}
}

// TestToEndpointPolicy runs xlane_to_endpoint (tcx egress): what Linux
// delivers to an endpoint is judged by the same policy, by source and
// destination address.
func TestToEndpointPolicy(t *testing.T) {
	h := newHarness(t)
	dev := h.links[devEP1]
	// iif: the device Linux received the packet on (0: the node sent it).
	run := func(t *testing.T, frame []byte, iif int, wantRet int32, r Reason) {
		t.Helper()
		h.resetMetrics(t)
		opts := skbContext{IngressIfindex: uint32(iif), Ifindex: uint32(dev)}
		ret, err := RunVerdict(h.do, h.objs.ToEndpoint(), h.objs.Metrics(),
			&ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256), Context: opts})
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if int32(ret) != wantRet {
			t.Errorf("return value %d, want %d (metrics: %s)", int32(ret), wantRet, formatMetrics(h.metrics(t)))
		}
		wantM := map[MetricsKey]MetricsVal{metricsKey(dev, r, DirIngress): {Packets: 1, Bytes: uint64(len(frame))}}
		if got := h.metrics(t); !maps.Equal(got, wantM) {
			t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(wantM))
		}
	}
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			h.setPolicy(t, epSrc, pol.srcNet, pol.srcFlags)
			h.setPolicy(t, epPeer, pol.peerNet, pol.peerFlag)
			frames := policyFrames(t, epPeer.v4, epPeer.v6)
			for _, name := range sortedKeys(frames) {
				t.Run(name, func(t *testing.T) {
					// From the sender's host device: Linux
					// forwards what a program passed to it.
					if pol.apart != 0 {
						run(t, frames[name], h.ifindexOf(epSrc), actShot, pol.apart)
					} else {
						run(t, frames[name], h.ifindexOf(epSrc), actPass, deliver)
					}
				})
			}
			// From the node: always delivered; from outside, a new
			// flow is unsolicited whatever the policy
			// (TestToEndpointUnsolicited).
			t.Run("ipv4/from the node", func(t *testing.T) {
				run(t, pktSpec{src: addr("198.51.100.1"), dst: epPeer.v4}.frame(t), 0, actPass, deliver)
			})
			t.Run("ipv6/from outside", func(t *testing.T) {
				run(t, pktSpec{src: addr("2001:db8:203::9"), dst: epPeer.v6}.frame(t), 1, actShot, tcXlReasonXL_DROP_UNSOLICITED)
			})
		})
	}
}

func sortedKeys(m map[string][]byte) []string { return slices.Sorted(maps.Keys(m)) }

// TestNetkitPolicy: netkit's peer program (the tc pipeline, redirecting to
// the destination's host device) and its primary program (what enters the
// container, counted on the endpoint of the destination address) keep
// endpoints apart the same way.
func TestNetkitPolicy(t *testing.T) {
	h := newHarness(t)
	nk := netkitObjs(t, h)
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			h.setPolicy(t, epSrc, pol.srcNet, pol.srcFlags)
			h.setPolicy(t, epPeer, pol.peerNet, pol.peerFlag)
			frames := policyFrames(t, epPeer.v4, epPeer.v6)
			for _, name := range sortedKeys(frames) {
				t.Run("peer/"+name, func(t *testing.T) {
					w := toPeer(epPeer)
					w.peer = 0 // the destination's device counts it
					if pol.apart != 0 {
						w = dropped(pol.apart)
					}
					ifindex := h.links[devEP0]
					h.resetMetrics(t)
					ret, out, err := h.runProg(nk.FromEndpoint, frames[name], ifindex)
					if err != nil {
						t.Fatalf("run: %v", err)
					}
					w.hook = HookNetkit
					h.verify(t, ifindex, frames[name], frames[name], ret, out, w)
				})
				t.Run("primary/"+name, func(t *testing.T) {
					h.resetMetrics(t)
					ret, _, err := h.runProgFrom(nk.ToEndpoint, frames[name], h.links[devEP0+"p"], 0)
					if err != nil {
						t.Fatalf("run: %v", err)
					}
					wantRet, r := actPass, deliver
					if pol.apart != 0 {
						wantRet, r = actShot, pol.apart
					}
					if ret != wantRet {
						t.Errorf("return value %d, want %d", ret, wantRet)
					}
					wantM := map[MetricsKey]MetricsVal{metricsKeyAt(HookNetkit, epPeer.ifindex, r, DirIngress): {Packets: 1, Bytes: uint64(len(frames[name]))}}
					if got := h.metrics(t); !maps.Equal(got, wantM) {
						t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(wantM))
					}
				})
			}
		})
	}
}

// TestPublishedPassesPolicy: a published port's flow between endpoints the
// policy keeps apart passes (Docker's userland proxy relays it): the
// request to the node's address is translated and delivered, its reply
// too, in both families; a packet straight to the same endpoint is still
// dropped. What Linux delivers (tcx egress: netkit's redirect, an XDP
// fallback) passes for the flow's own tuple only.
func TestPublishedPassesPolicy(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	for _, pol := range []policy{
		{"other network, both isolated", 1, 2, EPFlagIsolated, EPFlagIsolated, dropIsolated},
		{"same network, icc off", 1, 1, EPFlagNoICC, EPFlagNoICC, dropICC},
	} {
		t.Run(pol.name, func(t *testing.T) {
			h.ctFlush(t)
			h.setPolicy(t, epSrc, pol.srcNet, pol.srcFlags)
			h.setPolicy(t, epNoFwd, pol.peerNet, pol.peerFlag)
			for _, f := range []ctFlow{
				{proto: ctTCP, src: ap(epSrc.v4, 40000), dst: ap(nodeV4, 8080), nat: CTNatDst, to: ap(epNoFwd.v4, 80)},
				{proto: ctUDP, src: ap(epSrc.v6, 40000), dst: ap(nodeV6, 5353), nat: CTNatDst, to: ap(epNoFwd.v6, 53)},
			} {
				h.publish(t, f.l4(), f.dst.Port(), f.to)
				t.Run(f.src.Addr().String()+"/request", func(t *testing.T) {
					p := f.orig("S").sentBy(epSrc)
					ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
					wantVerdict(t, ret, actRedirect, in, out)
					wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
					h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdPeer, DirEgress}, ctMetric{h.links[devEP1], fwdPeer, DirIngress})
				})
				t.Run(f.src.Addr().String()+"/reply", func(t *testing.T) {
					rp := f.reply("SA").sentBy(epNoFwd)
					ret, in, out := h.ctRun(t, progFromEP, devEP1, rp)
					wantVerdict(t, ret, actRedirect, in, out)
					wantFrame(t, out, rp.translated(CTNatSrc, f.dst).routedTo(epSrc.mac, epSrc.hostMAC))
					h.wantMetrics(t, len(in), ctMetric{h.links[devEP1], fwdPeer, DirEgress}, ctMetric{h.links[devEP0], fwdPeer, DirIngress})
				})
				// The translated request as Linux delivers it, and a
				// packet of another source port the flow does not own.
				for _, c := range []struct {
					name  string
					sport uint16
					ret   int32
					r     Reason
				}{{"delivered request", f.src.Port(), actPass, deliver}, {"delivered other port", f.src.Port() + 1, actShot, pol.apart}} {
					t.Run(f.src.Addr().String()+"/"+c.name, func(t *testing.T) {
						p := ctPkt{src: ap(f.src.Addr(), c.sport), dst: f.to, proto: f.proto, flags: "S"}.sentBy(epSrc)
						in := p.frame(t)
						h.resetMetrics(t)
						ret, _, err := h.runProgFrom(h.objs.ToEndpoint(), in, h.links[devEP1], h.links[devEP0])
						if err != nil {
							t.Fatalf("run: %v", err)
						}
						if ret != c.ret {
							t.Errorf("return value %d, want %d (metrics: %s)", ret, c.ret, formatMetrics(h.metrics(t)))
						}
						h.wantMetrics(t, len(in), ctMetric{h.links[devEP1], c.r, DirIngress})
					})
				}
				t.Run(f.src.Addr().String()+"/direct", func(t *testing.T) {
					p := ctPkt{src: ap(f.src.Addr(), 40100), dst: f.to, proto: f.proto, flags: "S"}.sentBy(epSrc)
					ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
					wantVerdict(t, ret, actShot, in, out)
					h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], pol.apart, DirEgress})
				})
			}
		})
	}
}
