package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
)

// TestToEndpointHostBackend: a service whose backend is the node's own
// address (a hostNetwork backend, the kubernetes Service on a
// control-plane node), dialled from an endpoint. The endpoint's program
// DNATs the SYN to the node; the node's stack answers through Linux, and
// xlane_to_endpoint (tcx egress, no ingress device) translates the answer
// back to come from the VIP, checksums intact. The same tuple arriving
// from off the node (an ingress device) is left alone.
//
//	epSrc --SYN--> VIP:80 ==[from_endpoint: DNAT]==> node:6443 (Linux)
//	epSrc <--SYN-ACK from VIP:80 ==[to_endpoint: reverse]== node:6443
func TestToEndpointHostBackend(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	dev := h.links[devEP0]
	for i, c := range []struct {
		vip  netip.AddrPort
		node netip.Addr
		src  netip.Addr
	}{
		{ap(addr("10.96.3.1"), 443), nodeV4, epSrc.v4},
		{ap(addr("fd00:96::3:1"), 443), nodeV6, epSrc.v6},
	} {
		for j, proto := range []layers.IPProtocol{ctTCP, ctUDP} {
			be := ap(c.node, 6443)
			k := ServiceKey{Addr: c.vip.Addr().As16(), Port: nbo(c.vip.Port()), Proto: uint8(proto)}
			h.objs.Services().Delete(&k)
			h.objs.Backends().Delete(&BackendKey{Service: uint32(41 + 2*i + j)})
			h.putService(t, testService{id: uint32(41 + 2*i + j), vip: c.vip, proto: proto,
				backends: []endpointPort{{endpoint{v4: nodeV4, v6: nodeV6}, 6443}}})
			t.Run(family4or6(c.node)+"/"+proto.String(), func(t *testing.T) {
				f := ctFlow{proto: proto, src: ap(c.src, 40000), dst: c.vip, nat: CTNatDst, to: be}
				p := f.orig("S").sentBy(epSrc)
				h.ctRun(t, progFromEP, devEP0, p)
				h.checkFlow(t, f, ctStNew, map[layers.IPProtocol]time.Duration{ctTCP: toTCPSyn, ctUDP: toUDP}[proto])
				ans := ctPkt{proto: proto, src: be, dst: f.src, flags: "SA"}.routedTo(epSrc.mac, epSrc.hostMAC)
				for _, iif := range []int{0, h.links[devUp]} {
					frame := ans.frame(t)
					opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
						Context: skbContext{IngressIfindex: uint32(iif), Ifindex: uint32(dev)}}
					ret, err := RunVerdict(h.do, h.objs.ToEndpoint(), h.objs.Metrics(), opts)
					if err != nil {
						t.Fatal(err)
					}
					if int32(ret) != actPass {
						t.Fatalf("ingress device %d: return %d, want %d", iif, int32(ret), actPass)
					}
					out := opts.DataOut[:len(frame)]
					if iif != 0 {
						wantVerdict(t, int32(ret), actPass, frame, out)
						continue
					}
					wantFrame(t, out, ans.translated(CTNatSrc, c.vip))
				}
				if proto == ctTCP {
					h.checkFlow(t, f, ctStEst, toTCPEst)
				}
			})
		}
	}
}
