package bpf

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestCTServiceNoBackendReject: with XL_CFG_NO_BACKEND_REJECT (xlaned
// --service-no-backend reject, the default) a new flow to a VIP without
// backends is answered as kube-proxy answers it, from the VIP, back the
// way it came: TCP with an RST, UDP with an ICMP port unreachable; from a
// container (xlane_from_endpoint) and from off the node (xlane_from_uplink).
// drop_no_backend counts it, no conntrack entry is made.
// TestCTServiceNoBackend covers the drop (the flag clear).
func TestCTServiceNoBackendReject(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	var c Config
	if err := h.objs.Config().Lookup(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	c.Flags |= ConfigNoBackendReject
	if err := h.objs.Config().Put(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	vips := []netip.AddrPort{ap(addr("10.96.2.1"), 80), ap(addr("fd00:96::2:1"), 80)}
	for i, vip := range vips {
		for j, proto := range []layers.IPProtocol{ctTCP, ctUDP} {
			h.putService(t, testService{id: uint32(31 + 2*i + j), vip: vip, proto: proto})
		}
	}
	for _, vip := range vips {
		for _, proto := range []layers.IPProtocol{ctTCP, ctUDP} {
			for _, from := range []string{"container", "outside"} {
				t.Run(family4or6(vip.Addr())+"/"+proto.String()+"/"+from, func(t *testing.T) {
					p, prog, dev, dir := firstToVIP(proto, vip, from)
					before := len(h.ctEntries(t))
					ret, in, out := h.ctRun(t, prog, dev, p)
					if ret != actRedirect {
						t.Fatalf("return value %d, want %d (the answer sent back)", ret, actRedirect)
					}
					h.wantMetrics(t, len(in), ctMetric{h.links[dev], dropNoBackend, dir})
					if n := len(h.ctEntries(t)); n != before {
						t.Errorf("%d conntrack entries, was %d", n, before)
					}
					wantNoBackendAnswer(t, out, p)
				})
			}
		}
	}
}

// firstToVIP is the first packet (a SYN) of a flow to vip from epSrc
// (from "container") or from off the node ("outside"), with the program,
// device and direction that see it.
func firstToVIP(proto layers.IPProtocol, vip netip.AddrPort, from string) (ctPkt, ctProg, string, Dir) {
	src, remote := epSrc.v4, remoteV4
	if vip.Addr().Is6() {
		src, remote = epSrc.v6, remoteV6
	}
	if from == "outside" {
		return ctFlow{proto: proto, src: ap(remote, 40000), dst: vip}.orig("S").fromOutside(), progFromUplink, devUp, DirIngress
	}
	return ctFlow{proto: proto, src: ap(src, 40000), dst: vip}.orig("S").sentBy(epSrc), progFromEP, devEP0, DirEgress
}

// wantNoBackendAnswer checks out is the answer to p: an RST (TCP) or an
// ICMP port unreachable (UDP) from p's destination to its source, MACs
// swapped.
func wantNoBackendAnswer(t *testing.T, out []byte, p ctPkt) {
	t.Helper()
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil || eth.SrcMAC.String() != p.dstMAC.String() || eth.DstMAC.String() != p.srcMAC.String() {
		t.Errorf("answer's Ethernet header: %v, want MACs swapped", eth)
	}
	var src, dst netip.Addr
	if ip4, ok := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		src, dst = netip.AddrFrom4([4]byte(ip4.SrcIP.To4())), netip.AddrFrom4([4]byte(ip4.DstIP.To4()))
	} else if ip6, ok := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		src, dst = netip.AddrFrom16([16]byte(ip6.SrcIP)), netip.AddrFrom16([16]byte(ip6.DstIP))
	}
	if src != p.dst.Addr() || dst != p.src.Addr() {
		t.Errorf("answer %v -> %v, want %v -> %v", src, dst, p.dst.Addr(), p.src.Addr())
	}
	if err := ctChecksums(out); err != nil {
		t.Errorf("answer: %v", err)
	}
	switch p.l4() {
	case ctTCP:
		tcp, ok := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok || !tcp.RST || uint16(tcp.SrcPort) != p.dst.Port() || uint16(tcp.DstPort) != p.src.Port() {
			t.Errorf("answer %v: want an RST from port %d to %d", tcp, p.dst.Port(), p.src.Port())
		}
	default:
		if ic, ok := pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok {
			if ic.TypeCode != layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort) {
				t.Errorf("answer ICMP %v, want port unreachable", ic.TypeCode)
			}
		} else if ic, ok := pk.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ok {
			if ic.TypeCode != layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, layers.ICMPv6CodePortUnreachable) {
				t.Errorf("answer ICMPv6 %v, want port unreachable", ic.TypeCode)
			}
		} else {
			t.Errorf("answer is no ICMP port unreachable: %v", pk)
		}
	}
}
