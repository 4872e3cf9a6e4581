package bpf

import (
	"net/netip"
	"testing"

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
