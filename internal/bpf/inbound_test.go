package bpf

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestToEndpointTracksInbound: a flow from off the node to an endpoint
// that lets unsolicited flows in and masquerades its own (what Kubernetes'
// ConfigMap asks for) is tracked where Linux delivers it (tcx egress, no
// rule set): the endpoint's answer then leaves untranslated, from the
// endpoint's address, not masqueraded to the node's. The endpoint's own
// new flows are still masqueraded.
func TestToEndpointTracksInbound(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	dev := h.links[devEP0]
	for _, proto := range []layers.IPProtocol{ctTCP, ctUDP} {
		for _, outside := range []netip.Addr{remoteV4, remoteV6} {
			ep := epSrc.v4
			if outside.Is6() {
				ep = epSrc.v6
			}
			t.Run(family4or6(outside)+"/"+proto.String(), func(t *testing.T) {
				h.ctFlush(t)
				h.setPolicy(t, epSrc, 1, EPFlagAllowUnsolicited)
				h.setMasquerade(t, epSrc, true)
				t.Cleanup(func() { h.setPolicy(t, epSrc, 1, 0); h.setMasquerade(t, epSrc, false) })
				in := ctPkt{proto: proto, src: ap(outside, 40000), dst: ap(ep, 8080), flags: "S"}.routedTo(epSrc.mac, epSrc.hostMAC)
				frame := in.frame(t)
				ret, err := RunVerdict(h.do, h.objs.ToEndpoint(), h.objs.Metrics(),
					&ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
						Context: skbContext{IngressIfindex: uint32(h.links[devUp]), Ifindex: uint32(dev)}})
				if err != nil {
					t.Fatal(err)
				}
				if int32(ret) != actPass {
					t.Fatalf("inbound: return %d, want %d", int32(ret), actPass)
				}
				// The answer: forwarded with the endpoint's address.
				ans := ctPkt{proto: proto, src: ap(ep, 8080), dst: ap(outside, 40000), flags: "SA"}.sentBy(epSrc)
				ret2, _, out := h.ctRun(t, progFromEP, devEP0, ans)
				if ret2 == actShot {
					t.Fatalf("answer dropped")
				}
				if got := srcOf(t, out); got != ep {
					t.Errorf("the answer leaves from %v, want the endpoint's %v (not masqueraded)", got, ep)
				}
				// The endpoint's own new flow: masqueraded.
				own := ctPkt{proto: proto, src: ap(ep, 41000), dst: ap(outside, 443), flags: "S"}.sentBy(epSrc)
				if _, _, out := h.ctRun(t, progFromEP, devEP0, own); srcOf(t, out) == ep {
					t.Errorf("the endpoint's own flow left from its address: not masqueraded")
				}
			})
		}
	}
}

// srcOf is the source address of the IP packet in frame.
func srcOf(t *testing.T, frame []byte) netip.Addr {
	t.Helper()
	pk := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if ip4, ok := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		return netip.AddrFrom4([4]byte(ip4.SrcIP.To4()))
	}
	if ip6, ok := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		return netip.AddrFrom16([16]byte(ip6.SrcIP))
	}
	t.Fatalf("no IP packet in %x", frame)
	return netip.Addr{}
}
