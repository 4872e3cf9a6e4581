package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf/bpftest"
)

// The parse stage of xlane_from_endpoint (lib/parse.h, lib/l4.h: ep_parsed):
// what is not IP goes to Linux, what is malformed is dropped, what
// BPF_PROG_TEST_RUN refuses goes through the real datapath. Run on the
// harness of harness_test.go, the topology of tc_test.go; the XDP twin's
// tables are xdp_test.go's (TestXDPNonIP, TestXDPMalformed).

func nonIPCases(tb testing.TB) []verdictCase {
	arp := bpftest.Serialize(tb,
		&layers.Ethernet{SrcMAC: epSrc.mac, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: epSrc.mac, SourceProtAddress: epSrc.v4.AsSlice(),
			DstHwAddress: make([]byte, 6), DstProtAddress: []byte{10, 0, 0, 1}})
	unknown := bpftest.Serialize(tb,
		&layers.Ethernet{SrcMAC: epSrc.mac, DstMAC: epSrc.hostMAC, EthernetType: 0x88b5},
		gopacket.Payload(payload))
	return []verdictCase{
		{"arp request", devEP0, arp, passed(passNonIP)},
		// A tag in the frame (prog.Run keeps it there; a real veth moves
		// it to skb metadata, test/e2e TestVLANTaggedFromEndpoint) is
		// refused, not handed to Linux to forward.
		{"802.1Q ipv4", devEP0, pktSpec{src: epSrc.v4, dst: epPeer.v4, vlan: 100}.frame(tb), dropped(dropVLAN)},
		{"802.1Q ipv6", devEP0, pktSpec{src: epSrc.v6, dst: epPeer.v6, vlan: 100}.frame(tb), dropped(dropVLAN)},
		{"802.1ad ipv4", devEP0, edit(pktSpec{src: epSrc.v4, dst: epPeer.v4, vlan: 100}.frame(tb),
			func(b []byte) { b[12], b[13] = 0x88, 0xa8 }), dropped(dropVLAN)},
		{"unknown ethertype", devEP0, unknown, passed(passNonIP)},
		{"ethernet header only", devEP0, unknown[:ethHdrLen], passed(passNonIP)},
	}
}

func malformedCases(tb testing.TB) []verdictCase {
	v4, v6 := tcp4(tb, epPeer.v4), tcp6(tb, epPeer.v6)
	const l3 = ethHdrLen
	setU16 := func(off int, v uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[off:], v) }
	}
	setByte := func(off int, v byte) func([]byte) {
		return func(b []byte) { b[off] = v }
	}
	bad := dropped(dropMalformed)
	return []verdictCase{
		{"ipv4/ihl 4", devEP0, edit(v4, setByte(l3, 0x44)), bad},
		{"ipv4/ihl 0", devEP0, edit(v4, setByte(l3, 0x40)), bad},
		{"ipv4/tot_len one beyond frame", devEP0, edit(v4, setU16(l3+2, uint16(len(v4)-l3+1))), bad},
		{"ipv4/tot_len 0xffff", devEP0, edit(v4, setU16(l3+2, 0xffff)), bad},
		{"ipv4/tot_len shorter than header", devEP0, edit(v4, setU16(l3+2, 19)), bad},
		{"ipv4/tot_len 0 on small frame", devEP0, edit(v4, setU16(l3+2, 0)), bad},
		{"ipv4/packet cut short", devEP0, v4[:l3+24], bad},
		{"ipv4/version 6", devEP0, edit(v4, setByte(l3, 0x65)), bad},
		{"ipv4/version 0", devEP0, edit(v4, setByte(l3, 0x05)), bad},
		{"ipv6/payload_len one beyond frame", devEP0, edit(v6, setU16(l3+4, uint16(len(v6)-l3-40+1))), bad},
		{"ipv6/packet cut short", devEP0, v6[:len(v6)-1], bad},
		{"ipv6/version 4", devEP0, edit(v6, setByte(l3, 0x40|v6[l3]&0x0f)), bad},
	}
}

// l4MalformedCases are transport headers the L4 parsers refuse (issue 12
// items 4 and 11): a first fragment too short for its TCP/UDP header (RFC
// 1858: it would hide its ports from port rules), a TCP data offset under
// 5 words or beyond the packet, a UDP length under 8 or beyond the packet.
func l4MalformedCases(tb testing.TB) []verdictCase {
	bad := dropped(dropMalformed)
	tcp4off, tcp6off := ethHdrLen+20, ethHdrLen+40
	v4, v6 := tcp4(tb, epPeer.v4), tcp6(tb, epPeer.v6)
	bare4 := pktSpec{src: epSrc.v4, dst: epPeer.v4, payload: []byte{}}.frame(tb) // 20-byte TCP segment
	u4 := pktSpec{src: epSrc.v4, dst: epPeer.v4, proto: layers.IPProtocolUDP}.frame(tb)
	u6 := pktSpec{src: epSrc.v6, dst: epPeer.v6, proto: layers.IPProtocolUDP}.frame(tb)
	doff := func(off int, words byte) func([]byte) { return func(b []byte) { b[off+12] = words << 4 } }
	ulen := func(off int, n uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[off+4:], n) }
	}
	return []verdictCase{
		{"ipv4/tcp data offset 4", devEP0, edit(v4, doff(tcp4off, 4)), bad},
		{"ipv4/tcp data offset 0", devEP0, edit(v4, doff(tcp4off, 0)), bad},
		{"ipv4/tcp data offset beyond the packet", devEP0, edit(bare4, doff(tcp4off, 6)), bad},
		{"ipv6/tcp data offset 4", devEP0, edit(v6, doff(tcp6off, 4)), bad},
		{"ipv4/udp length 7", devEP0, edit(u4, ulen(tcp4off, 7)), bad},
		{"ipv4/udp length beyond the packet", devEP0, edit(u4, ulen(tcp4off, uint16(len(u4)-tcp4off+1))), bad},
		{"ipv6/udp length 0", devEP0, edit(u6, ulen(tcp6off, 0)), bad},
		{"ipv6/udp length beyond the packet", devEP0, edit(u6, ulen(tcp6off, uint16(len(u6)-tcp6off+1))), bad},
		{"ipv4/first fragment with 8 bytes of tcp", devEP0, firstFragment4(tb, layers.IPProtocolTCP, 8), bad},
		{"ipv4/first fragment with 19 bytes of tcp", devEP0, firstFragment4(tb, layers.IPProtocolTCP, 19), bad},
		{"ipv4/first fragment with 4 bytes of udp", devEP0, firstFragment4(tb, layers.IPProtocolUDP, 4), bad},
		{"ipv6/first fragment with 8 bytes of tcp", devEP0, firstFragment6(tb, 8), bad},
		// A first fragment with the whole header is fine.
		{"ipv4/first fragment with the tcp header", devEP0, firstFragment4(tb, layers.IPProtocolTCP, 24), toPeer(epPeer)},
		// IPv6 extension header chains (ext_test.go's withExts).
		{"ipv6/hop-by-hop header longer than the packet", devEP0, edit(withExts(v6, extHopByHop), func(b []byte) { b[tcp6off+1] = 10 }), bad},
		{"ipv6/payload ends inside the destination options", devEP0, edit(withExts(v6, extHopByHop, extDstOpts)[:tcp6off+12], func(b []byte) {
			binary.BigEndian.PutUint16(b[ethHdrLen+4:], 12)
		}), bad},
		{"ipv6/tcp behind three extension headers", devEP0, withExts(v6, extHopByHop, extRouting, extDstOpts), toPeer(epPeer)},
		{"ipv6/not the first fragment, behind hop-by-hop", devEP0, edit(withExts(v6, extHopByHop, extFragment), func(b []byte) { b[tcp6off+8+3] = 0x10 }), toPeer(epPeer)},
	}
}

// firstFragment4 is the first fragment (MF set, offset 0) of a segment
// from epSrc to epPeer, carrying only n bytes of its transport header.
func firstFragment4(tb testing.TB, proto layers.IPProtocol, n int) []byte {
	l4 := make([]byte, 24)
	binary.BigEndian.PutUint16(l4[0:], 40000)
	binary.BigEndian.PutUint16(l4[2:], 22)
	if proto == layers.IPProtocolTCP {
		l4[12], l4[13] = 5<<4, 0x02 // SYN
	} else {
		binary.BigEndian.PutUint16(l4[4:], 1000) // the whole datagram's
	}
	return bpftest.Serialize(tb,
		&layers.Ethernet{SrcMAC: epSrc.mac, DstMAC: epSrc.hostMAC, EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, TTL: 64, Id: 7, Flags: layers.IPv4MoreFragments, Protocol: proto,
			SrcIP: epSrc.v4.AsSlice(), DstIP: epPeer.v4.AsSlice()},
		gopacket.Payload(l4[:n]))
}

// firstFragment6 is firstFragment4 in IPv6: a fragment header, offset 0,
// M set, then n bytes of a TCP header.
func firstFragment6(tb testing.TB, n int) []byte {
	l4 := make([]byte, 20)
	binary.BigEndian.PutUint16(l4[0:], 40000)
	binary.BigEndian.PutUint16(l4[2:], 22)
	l4[12], l4[13] = 5<<4, 0x02
	frag := []byte{byte(layers.IPProtocolTCP), 0, 0, 1, 0, 0, 0, 7} // offset 0, M
	return bpftest.Serialize(tb,
		&layers.Ethernet{SrcMAC: epSrc.mac, DstMAC: epSrc.hostMAC, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment,
			SrcIP: epSrc.v6.AsSlice(), DstIP: epPeer.v6.AsSlice()},
		gopacket.Payload(append(frag, l4[:n]...)))
}

// truncatedCases have an IPv4/IPv6 ethertype but less than a fixed IP
// header. BPF_PROG_TEST_RUN refuses those (see testRunRefuses), so
// TestFromEndpointTruncated sends them through a veth instead.
func truncatedCases(tb testing.TB) []verdictCase {
	v4, v6 := tcp4(tb, epPeer.v4), tcp6(tb, epPeer.v6)
	const l3 = ethHdrLen
	bad := dropped(dropMalformed)
	return []verdictCase{
		{"ipv4/no ip header", devEP0, v4[:l3], bad},
		{"ipv4/10 bytes of ip header", devEP0, v4[:l3+10], bad},
		{"ipv4/19 bytes of ip header", devEP0, v4[:l3+19], bad},
		{"ipv6/no ip header", devEP0, v6[:l3], bad},
		{"ipv6/39 bytes of ip header", devEP0, v6[:l3+39], bad},
	}
}

// testRunRefuses reports whether BPF_PROG_TEST_RUN rejects frame with EINVAL
// before the program runs, as measured on Linux 6.18: shorter than an
// Ethernet header, or an IPv4/IPv6 ethertype without a full fixed IP header.
func testRunRefuses(frame []byte) bool {
	if len(frame) < ethHdrLen {
		return true
	}
	switch layers.EthernetType(binary.BigEndian.Uint16(frame[12:14])) {
	case layers.EthernetTypeIPv4:
		return len(frame) < ethHdrLen+20
	case layers.EthernetTypeIPv6:
		return len(frame) < ethHdrLen+40
	}
	return false
}

func TestFromEndpointNonIP(t *testing.T) { runCases(t, nonIPCases(t)) }

func TestFromEndpointMalformed(t *testing.T) { runCases(t, malformedCases(t)) }

func TestFromEndpointL4Malformed(t *testing.T) { runCases(t, l4MalformedCases(t)) }

// TestFromEndpointTruncated checks frames cut inside the IP header. The
// kernel refuses them in BPF_PROG_TEST_RUN, but a container can send them,
// so the program is attached to xl-ep0 with tcx and the frames go in through
// a packet socket on the veth's other end. Only the metrics show the verdict
// there; FuzzFromEndpoint checks that drop reasons come with TC_ACT_SHOT.
func TestFromEndpointTruncated(t *testing.T) {
	h := newHarness(t)
	h.attach(t, devEP0)
	for _, tc := range truncatedCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ifindex := h.links[tc.dev]
			switch _, _, err := h.run(tc.frame, ifindex); {
			case err == nil: // a kernel that runs them: the verdict must hold
				h.check(t, ifindex, tc.frame, tc.want)
			case !errors.Is(err, unix.EINVAL):
				t.Fatalf("BPF_PROG_TEST_RUN: %v, want EINVAL", err)
			}

			h.resetMetrics(t)
			h.send(t, tc.dev+"p", tc.frame)
			// IPv6 autoconfiguration on the veth counts too, under other
			// keys: look at the expected one only.
			key := metricsKey(ifindex, tc.want.reason, DirEgress)
			want := MetricsVal{Packets: 1, Bytes: uint64(len(tc.frame))}
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				m := h.metrics(t)
				if m[key] == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after sending %d bytes on %s: metrics %s\nwant %d/%s/%s: %+v",
						len(tc.frame), tc.dev+"p", formatMetrics(m), ifindex, tc.want.reason, DirEgress, want)
				}
			}
		})
	}
}

// TestFromEndpointShortFrame: BPF_PROG_TEST_RUN refuses tc input shorter
// than an Ethernet header, so the program never sees one; make sure the
// refusal is an error and nothing is counted.
func TestFromEndpointShortFrame(t *testing.T) {
	h := newHarness(t)
	frame := tcp4(t, epPeer.v4)
	for _, n := range []int{0, 1, ethHdrLen - 1} {
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			h.resetMetrics(t)
			if _, _, err := h.run(frame[:n], h.links[devEP0]); !errors.Is(err, unix.EINVAL) {
				t.Errorf("run: %v, want EINVAL", err)
			}
			if got := h.metrics(t); len(got) != 0 {
				t.Errorf("metrics counted: %s", formatMetrics(got))
			}
		})
	}
}
