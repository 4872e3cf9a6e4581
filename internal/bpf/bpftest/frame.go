package bpftest

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Frame describes one Ethernet frame carrying an IPv4 or IPv6 packet: the
// input of a test table's row and the output it expects. The zero value
// of each field is the common case; Bytes builds it with gopacket,
// lengths and checksums computed.
type Frame struct {
	SrcMAC, DstMAC net.HardwareAddr
	VLAN           uint16 // non-zero: an 802.1Q tag with this VID

	// Src and Dst are the addresses and the L4 ports; for ICMP echo,
	// Src's port is the identifier (Dst's is ignored).
	Src, Dst netip.AddrPort
	Proto    layers.IPProtocol // 0: TCP; UDP, ICMPv4, ICMPv6 (echo)
	TTL      uint8             // TTL or hop limit; 0: 64

	ID          uint16 // IPv4 identification
	DF          bool   // IPv4 don't fragment
	RouterAlert bool   // IPv4 router-alert option (ihl 6)
	FlowLabel   uint32 // IPv6

	TCPFlags  string // any of S, A, F, R, P
	Seq, Ack  uint32 // TCP
	EchoReply bool   // ICMP: an echo reply, not a request
	EchoSeq   uint16 // ICMP echo sequence number

	Payload []byte // L4 payload
	Pad     int    // Ethernet trailer bytes after the IP packet
}

// L4 is the frame's protocol, TCP for 0.
func (f Frame) L4() layers.IPProtocol {
	if f.Proto == 0 {
		return layers.IPProtocolTCP
	}
	return f.Proto
}

// Bytes builds the frame.
func (f Frame) Bytes(tb testing.TB) []byte {
	tb.Helper()
	ttl := f.TTL
	if ttl == 0 {
		ttl = 64
	}
	proto := f.L4()
	var (
		ethType layers.EthernetType
		ip      interface {
			gopacket.NetworkLayer
			gopacket.SerializableLayer
		}
	)
	src, dst := f.Src.Addr(), f.Dst.Addr()
	if src.Is4() {
		ethType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, TTL: ttl, Id: f.ID, Protocol: proto,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if f.DF {
			ip4.Flags = layers.IPv4DontFragment
		}
		if f.RouterAlert {
			ip4.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
		}
		ip = ip4
	} else {
		ethType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: proto, FlowLabel: f.FlowLabel,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	}
	eth := &layers.Ethernet{SrcMAC: f.SrcMAC, DstMAC: f.DstMAC, EthernetType: ethType}
	ls := []gopacket.SerializableLayer{eth}
	if f.VLAN != 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: f.VLAN, Type: ethType})
	}
	ls = append(ls, ip)
	switch proto {
	case layers.IPProtocolTCP:
		fl := func(c string) bool { return strings.Contains(f.TCPFlags, c) }
		t := &layers.TCP{SrcPort: layers.TCPPort(f.Src.Port()), DstPort: layers.TCPPort(f.Dst.Port()),
			Seq: f.Seq, Ack: f.Ack, Window: 64240,
			SYN: fl("S"), ACK: fl("A"), FIN: fl("F"), RST: fl("R"), PSH: fl("P")}
		t.SetNetworkLayerForChecksum(ip)
		ls = append(ls, t)
	case layers.IPProtocolUDP:
		u := &layers.UDP{SrcPort: layers.UDPPort(f.Src.Port()), DstPort: layers.UDPPort(f.Dst.Port())}
		u.SetNetworkLayerForChecksum(ip)
		ls = append(ls, u)
	case layers.IPProtocolICMPv4:
		typ := uint8(layers.ICMPv4TypeEchoRequest)
		if f.EchoReply {
			typ = layers.ICMPv4TypeEchoReply
		}
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: f.Src.Port(), Seq: f.EchoSeq})
	case layers.IPProtocolICMPv6:
		typ := uint8(layers.ICMPv6TypeEchoRequest)
		if f.EchoReply {
			typ = layers.ICMPv6TypeEchoReply
		}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
		ic.SetNetworkLayerForChecksum(ip)
		ls = append(ls, ic, &layers.ICMPv6Echo{Identifier: f.Src.Port(), SeqNumber: f.EchoSeq})
	default:
		tb.Fatalf("frame: protocol %v", proto)
	}
	ls = append(ls, gopacket.Payload(f.Payload))
	return append(Serialize(tb, ls...), make([]byte, f.Pad)...)
}

// Serialize builds a frame of ls, lengths and checksums computed: for
// what Frame does not describe (ICMP errors, fragments, other layers).
func Serialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		tb.Fatalf("serialize: %v", err)
	}
	return bytes.Clone(buf.Bytes())
}
