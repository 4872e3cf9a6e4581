package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Spec is a packet to build.
type Spec struct {
	SrcMAC, DstMAC   net.HardwareAddr
	Src, Dst         netip.Addr
	Proto            string // tcp, udp, icmp (icmpv6 for IPv6 destinations)
	SrcPort, DstPort uint16 // ICMP: SrcPort is the echo identifier
	Flags            string // TCP: S, SA, A, F, FA, R, RA, P, PA (letters FSRPAU)
	TTL              uint8  // 0: 64
}

// payload marks a trace's packets in captures.
var payload = gopacket.Payload("xlane trace")

// Build serializes s into an Ethernet frame with valid checksums.
func Build(s Spec) ([]byte, error) {
	if !s.Src.IsValid() || !s.Dst.IsValid() {
		return nil, errors.New("build packet: no source or destination address")
	}
	if s.Src.Is4() != s.Dst.Is4() {
		return nil, fmt.Errorf("build packet: source %s and destination %s are of different families", s.Src, s.Dst)
	}
	ttl := s.TTL
	if ttl == 0 {
		ttl = 64
	}
	proto := strings.ToLower(s.Proto)
	if proto == "" {
		proto = "tcp"
	}
	eth := &layers.Ethernet{SrcMAC: s.SrcMAC, DstMAC: s.DstMAC}
	var ip interface {
		gopacket.NetworkLayer
		gopacket.SerializableLayer
	}
	var ipProto layers.IPProtocol
	switch proto {
	case "tcp":
		ipProto = layers.IPProtocolTCP
	case "udp":
		ipProto = layers.IPProtocolUDP
	case "icmp", "icmpv6", "icmp6":
		ipProto = layers.IPProtocolICMPv4
		if s.Dst.Is6() {
			ipProto = layers.IPProtocolICMPv6
		}
	default:
		return nil, fmt.Errorf("build packet: protocol %q: want tcp, udp or icmp", s.Proto)
	}
	if s.Src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip = &layers.IPv4{Version: 4, TTL: ttl, Id: 1, Protocol: ipProto, Flags: layers.IPv4DontFragment,
			SrcIP: s.Src.AsSlice(), DstIP: s.Dst.AsSlice()}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: ipProto, SrcIP: s.Src.AsSlice(), DstIP: s.Dst.AsSlice()}
	}
	ls := []gopacket.SerializableLayer{eth, ip}
	switch ipProto {
	case layers.IPProtocolTCP:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(s.SrcPort), DstPort: layers.TCPPort(s.DstPort), Seq: 1, Window: 64240}
		flags := s.Flags
		if flags == "" {
			flags = "S"
		}
		for _, f := range strings.ToUpper(flags) {
			switch f {
			case 'S':
				tcp.SYN = true
			case 'A':
				tcp.ACK, tcp.Ack = true, 1
			case 'F':
				tcp.FIN = true
			case 'R':
				tcp.RST = true
			case 'P':
				tcp.PSH = true
			case 'U':
				tcp.URG = true
			default:
				return nil, fmt.Errorf("build packet: TCP flag %q: want letters of FSRPAU", f)
			}
		}
		tcp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, tcp)
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(s.SrcPort), DstPort: layers.UDPPort(s.DstPort)}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, udp)
	case layers.IPProtocolICMPv4:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0),
			Id: s.SrcPort, Seq: 1})
	case layers.IPProtocolICMPv6:
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
		icmp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, icmp, &layers.ICMPv6Echo{Identifier: s.SrcPort, SeqNumber: 1})
	}
	ls = append(ls, payload)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		return nil, fmt.Errorf("build packet: %w", err)
	}
	return buf.Bytes(), nil
}

// ReadPcap returns the first packet of a pcap or pcapng capture of an
// Ethernet link.
func ReadPcap(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read capture: %w", err)
	}
	var (
		data []byte
		lt   layers.LinkType
	)
	if bytes.HasPrefix(raw, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		ng, nerr := pcapgo.NewNgReader(bytes.NewReader(raw), pcapgo.DefaultNgReaderOptions)
		if nerr != nil {
			return nil, fmt.Errorf("read pcapng: %w", nerr)
		}
		data, _, err = ng.ReadPacketData()
		lt = ng.LinkType()
	} else {
		pr, perr := pcapgo.NewReader(bytes.NewReader(raw))
		if perr != nil {
			return nil, fmt.Errorf("read pcap: %w", perr)
		}
		data, _, err = pr.ReadPacketData()
		lt = pr.LinkType()
	}
	if err != nil {
		return nil, fmt.Errorf("read first packet: %w", err)
	}
	if lt != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("capture link type %s: want Ethernet (capture on the veth or uplink, not 'any')", lt)
	}
	return data, nil
}

// Tuple is what Parse reads of a frame.
type Tuple struct {
	Src, Dst         netip.Addr
	SrcMAC, DstMAC   net.HardwareAddr
	Proto            uint8
	SrcPort, DstPort uint16 // ICMP: type and code
	ICMP             bool
	Flags            string // TCP flags
	TTL              uint8
}

// Parse reads frame's addresses and ports; ok is false for what is not
// IPv4 or IPv6.
func Parse(frame []byte) (t Tuple, ok bool) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); eth != nil {
		t.SrcMAC, t.DstMAC = eth.SrcMAC, eth.DstMAC
	}
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		t.Src, _ = netip.AddrFromSlice(ip.SrcIP.To4())
		t.Dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
		t.Proto, t.TTL = uint8(ip.Protocol), ip.TTL
	case *layers.IPv6:
		t.Src, _ = netip.AddrFromSlice(ip.SrcIP)
		t.Dst, _ = netip.AddrFromSlice(ip.DstIP)
		t.Proto, t.TTL = uint8(ip.NextHeader), ip.HopLimit
	default:
		return t, false
	}
	switch l := p.TransportLayer().(type) {
	case *layers.TCP:
		t.SrcPort, t.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
		for _, f := range []struct {
			on bool
			c  string
		}{{l.SYN, "S"}, {l.ACK, "A"}, {l.FIN, "F"}, {l.RST, "R"}, {l.PSH, "P"}, {l.URG, "U"}} {
			if f.on {
				t.Flags += f.c
			}
		}
	case *layers.UDP:
		t.SrcPort, t.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
	}
	if ic, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ic != nil {
		t.ICMP, t.SrcPort, t.DstPort = true, uint16(ic.TypeCode.Type()), uint16(ic.TypeCode.Code())
	}
	if ic, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ic != nil {
		t.ICMP, t.SrcPort, t.DstPort = true, uint16(ic.TypeCode.Type()), uint16(ic.TypeCode.Code())
	}
	return t, true
}

// String summarises a frame's tuple: "tcp 10.0.0.2:40000 -> 10.0.0.3:80 [S] ttl 64".
func (t Tuple) String() string {
	proto := map[uint8]string{6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6"}[t.Proto]
	if proto == "" {
		proto = fmt.Sprintf("proto %d", t.Proto)
	}
	var b strings.Builder
	switch {
	case t.ICMP:
		fmt.Fprintf(&b, "%s %s -> %s type %d code %d", proto, t.Src, t.Dst, t.SrcPort, t.DstPort)
	case t.Proto == 6 || t.Proto == 17:
		fmt.Fprintf(&b, "%s %s -> %s", proto, netip.AddrPortFrom(t.Src, t.SrcPort), netip.AddrPortFrom(t.Dst, t.DstPort))
	default:
		fmt.Fprintf(&b, "%s %s -> %s", proto, t.Src, t.Dst)
	}
	if t.Flags != "" {
		fmt.Fprintf(&b, " [%s]", t.Flags)
	}
	fmt.Fprintf(&b, " ttl %d, %s -> %s", t.TTL, t.SrcMAC, t.DstMAC)
	return b.String()
}

// Summary is Parse(frame).String(), or what the frame is when not IP.
func Summary(frame []byte) string {
	t, ok := Parse(frame)
	if !ok {
		return fmt.Sprintf("%d bytes, not IPv4 or IPv6", len(frame))
	}
	return t.String()
}

// Decap returns the inner frame and VNI of frame if it is VXLAN to UDP
// port (what the tc program sends when it encapsulates in BPF,
// bpf/lib/overlay_encap.h); ok is false for anything else.
func Decap(frame []byte, port uint16) (inner []byte, vni uint32, ok bool) {
	if len(frame) < 14 {
		return nil, 0, false
	}
	off := 14
	switch uint16(frame[12])<<8 | uint16(frame[13]) {
	case 0x0800:
		if len(frame) < off+20 || frame[off]>>4 != 4 || frame[off+9] != 17 {
			return nil, 0, false
		}
		off += int(frame[off]&0x0f) * 4
	case 0x86dd:
		if len(frame) < off+40 || frame[off+6] != 17 {
			return nil, 0, false
		}
		off += 40
	default:
		return nil, 0, false
	}
	if len(frame) < off+8+8+14 || uint16(frame[off+2])<<8|uint16(frame[off+3]) != port || frame[off+8]&0x08 == 0 {
		return nil, 0, false
	}
	vx := frame[off+8:]
	return frame[off+16:], uint32(vx[4])<<16 | uint32(vx[5])<<8 | uint32(vx[6]), true
}
