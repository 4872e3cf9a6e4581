package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
)

// publishOn publishes nodePort/proto on host address host alone (the
// zero Addr: every node address) to to.
func (h *harness) publishOn(tb testing.TB, host netip.Addr, proto layers.IPProtocol, nodePort uint16, to netip.AddrPort) {
	tb.Helper()
	fam := uint8(6)
	if to.Addr().Is4() {
		fam = 4
	}
	k := PublishKey{Port: nbo(nodePort), Proto: uint8(proto), Family: fam}
	if host.IsValid() {
		k.Addr = host.As16()
	}
	if err := h.objs.Publish().Put(&k, &PublishVal{Addr: to.Addr().As16(), Port: nbo(to.Port())}); err != nil {
		tb.Fatal(err)
	}
}

// TestCTPublishHostIP: a port published on one host address (Kubernetes'
// hostPort with a hostIP) is translated on that destination alone; ports
// of the same number on another address or protocol are other mappings;
// a port published on every address is the node's (uplink) address's.
func TestCTPublishHostIP(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	hostA := addr("198.51.100.50")
	h.publishOn(t, hostA, ctTCP, 8080, ap(epNoFwd.v4, 80))
	h.publishOn(t, nodeV4, ctUDP, 8080, ap(epNoFwd.v4, 53))
	h.publishOn(t, addr("2001:db8:100::50"), ctTCP, 8080, ap(epNoFwd.v6, 81))
	h.publishOn(t, netip.Addr{}, ctTCP, 9090, ap(epNoFwd.v4, 90))
	for _, c := range []struct {
		name    string
		proto   layers.IPProtocol
		dst     netip.AddrPort
		to      netip.AddrPort // invalid: not published there
		outside bool
	}{
		{"tcp to the host IP", ctTCP, ap(hostA, 8080), ap(epNoFwd.v4, 80), true},
		{"tcp to the host IP from a container", ctTCP, ap(hostA, 8080), ap(epNoFwd.v4, 80), false},
		{"tcp to the node's address: another host IP's", ctTCP, ap(nodeV4, 8080), netip.AddrPort{}, true},
		{"udp to the node's address", ctUDP, ap(nodeV4, 8080), ap(epNoFwd.v4, 53), true},
		{"udp to the host IP: the node's address's", ctUDP, ap(hostA, 8080), netip.AddrPort{}, true},
		{"ipv6 tcp to the host IP", ctTCP, ap(addr("2001:db8:100::50"), 8080), ap(epNoFwd.v6, 81), true},
		{"every address: the node's", ctTCP, ap(nodeV4, 9090), ap(epNoFwd.v4, 90), true},
		{"every address: not another's", ctTCP, ap(hostA, 9090), netip.AddrPort{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := ap(remoteV4, 33000)
			if c.dst.Addr().Is6() {
				src = ap(remoteV6, 33000)
			}
			if !c.outside {
				src = ap(epSrc.v4, 41000)
			}
			f := ctFlow{proto: c.proto, src: src, dst: c.dst, nat: CTNatDst, to: c.to}
			p, prog, dev := f.orig("S").fromOutside(), progFromUplink, devUp
			if !c.outside {
				p, prog, dev = f.orig("S").sentBy(epSrc), progFromEP, devEP0
			}
			ret, in, out := h.ctRun(t, prog, dev, p)
			if !c.to.IsValid() {
				if ret == actRedirect {
					t.Errorf("translated where nothing is published: %s", frameDiff(out, in))
				}
				return
			}
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, c.to).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
		})
	}
}

// ---------------------------------------------------------------------------
// Published ports: DNAT of the node's address and port to an endpoint.

func (h *harness) publish(tb testing.TB, proto layers.IPProtocol, nodePort uint16, to netip.AddrPort) {
	tb.Helper()
	fam := uint8(6)
	if to.Addr().Is4() {
		fam = 4
	}
	k := PublishKey{Port: nbo(nodePort), Proto: uint8(proto), Family: fam}
	v := PublishVal{Addr: to.Addr().As16(), Port: nbo(to.Port())}
	if err := h.objs.Publish().Put(&k, &v); err != nil {
		tb.Fatal(err)
	}
}

func TestCTPublish(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.publish(t, ctTCP, 8080, ap(epNoFwd.v4, 80))
	h.publish(t, ctTCP, 8080, ap(epNoFwd.v6, 80))
	h.publish(t, ctUDP, 5353, ap(epNoFwd.v4, 53))
	for _, c := range []struct {
		name    string
		f       ctFlow
		est     time.Duration
		first   time.Duration
		outside bool
	}{
		{"ipv4/tcp from a container", ctFlow{proto: ctTCP, src: ap(epSrc.v4, 40000), dst: ap(nodeV4, 8080), nat: CTNatDst, to: ap(epNoFwd.v4, 80)}, toTCPEst, toTCPSyn, false},
		{"ipv6/tcp from a container", ctFlow{proto: ctTCP, src: ap(epSrc.v6, 40000), dst: ap(nodeV6, 8080), nat: CTNatDst, to: ap(epNoFwd.v6, 80)}, toTCPEst, toTCPSyn, false},
		{"ipv4/udp from a container", ctFlow{proto: ctUDP, src: ap(epSrc.v4, 40000), dst: ap(nodeV4, 5353), nat: CTNatDst, to: ap(epNoFwd.v4, 53)}, toUDPEst, toUDP, false},
		{"ipv4/tcp from outside", ctFlow{proto: ctTCP, src: ap(remoteV4, 33000), dst: ap(nodeV4, 8080), nat: CTNatDst, to: ap(epNoFwd.v4, 80)}, toTCPEst, toTCPSyn, true},
		{"ipv6/tcp from outside", ctFlow{proto: ctTCP, src: ap(remoteV6, 33000), dst: ap(nodeV6, 8080), nat: CTNatDst, to: ap(epNoFwd.v6, 80)}, toTCPEst, toTCPSyn, true},
	} {
		f := c.f
		t.Run(c.name, func(t *testing.T) {
			p, prog, dev, dir := f.orig("S").sentBy(epSrc), progFromEP, devEP0, DirEgress
			if c.outside {
				p, prog, dev, dir = f.orig("S").fromOutside(), progFromUplink, devUp, DirIngress
			}
			ret, in, out := h.ctRun(t, prog, dev, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
			h.wantMetrics(t, len(in), ctMetric{h.links[dev], fwdPeer, dir}, ctMetric{h.links[devEP1], fwdPeer, DirIngress})
			h.checkFlow(t, f, ctStNew, c.first)
			if c.outside {
				return // the reply leaves through Linux (no FIB path in this netns from xl-ep1)
			}
			t.Run("reply", func(t *testing.T) {
				rp := f.reply("SA").sentBy(epNoFwd)
				ret, in, out := h.ctRun(t, progFromEP, devEP1, rp)
				wantVerdict(t, ret, actRedirect, in, out)
				wantFrame(t, out, rp.translated(CTNatSrc, f.dst).routedTo(epSrc.mac, epSrc.hostMAC))
				h.wantMetrics(t, len(in), ctMetric{h.links[devEP1], fwdPeer, DirEgress}, ctMetric{h.links[devEP0], fwdPeer, DirIngress})
				h.checkFlow(t, f, ctStEst, c.est)
			})
		})
	}
	t.Run("ipv6/tcp behind extension headers", func(t *testing.T) { extPublished(t, h) })
	t.Run("unpublished port", func(t *testing.T) {
		f := ctFlow{src: ap(epSrc.v4, 40001), dst: ap(nodeV4, 8081)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], passNotFwded, DirEgress})
		h.checkFlow(t, f, ctStNew, toTCPSyn)
	})
}

// TestCTNodePort: a service whose VIP is the node's own address (a
// Kubernetes NodePort) is balanced from a container and from outside, as a
// published port is; a published port of the same number comes first.
func TestCTNodePort(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	one := []endpointPort{{epNoFwd, 80}}
	h.putService(t, testService{id: 21, vip: ap(nodeV4, 30080), proto: ctTCP, backends: one, size: 251})
	h.putService(t, testService{id: 22, vip: ap(nodeV6, 30080), proto: ctTCP, backends: one, size: 251})
	h.putService(t, testService{id: 23, vip: ap(nodeV4, 30081), proto: ctTCP, backends: []endpointPort{{epLo, 81}}, size: 251})
	h.publish(t, ctTCP, 30081, ap(epNoFwd.v4, 82))
	for _, c := range []struct {
		name    string
		f       ctFlow
		outside bool
	}{
		{"ipv4 from a container", ctFlow{proto: ctTCP, src: ap(epSrc.v4, 40000), dst: ap(nodeV4, 30080), nat: CTNatDst, to: ap(epNoFwd.v4, 80)}, false},
		{"ipv6 from a container", ctFlow{proto: ctTCP, src: ap(epSrc.v6, 40000), dst: ap(nodeV6, 30080), nat: CTNatDst, to: ap(epNoFwd.v6, 80)}, false},
		{"ipv4 from outside", ctFlow{proto: ctTCP, src: ap(remoteV4, 33000), dst: ap(nodeV4, 30080), nat: CTNatDst, to: ap(epNoFwd.v4, 80)}, true},
		{"ipv6 from outside", ctFlow{proto: ctTCP, src: ap(remoteV6, 33000), dst: ap(nodeV6, 30080), nat: CTNatDst, to: ap(epNoFwd.v6, 80)}, true},
		{"the published port first", ctFlow{proto: ctTCP, src: ap(remoteV4, 33001), dst: ap(nodeV4, 30081), nat: CTNatDst, to: ap(epNoFwd.v4, 82)}, true},
	} {
		f := c.f
		t.Run(c.name, func(t *testing.T) {
			p, prog, dev, dir := f.orig("S").sentBy(epSrc), progFromEP, devEP0, DirEgress
			if c.outside {
				p, prog, dev, dir = f.orig("S").fromOutside(), progFromUplink, devUp, DirIngress
			}
			ret, in, out := h.ctRun(t, prog, dev, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epNoFwd.mac, epNoFwd.hostMAC))
			h.wantMetrics(t, len(in), ctMetric{h.links[dev], fwdPeer, dir}, ctMetric{h.links[devEP1], fwdPeer, DirIngress})
			h.checkFlow(t, f, ctStNew, toTCPSyn)
		})
	}
}
