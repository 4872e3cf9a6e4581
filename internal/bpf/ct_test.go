package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// Conntrack, NAT and service tests of xlane_from_endpoint (tcx ingress of a
// host veth) and xlane_from_uplink (tcx ingress of the uplink), run with
// BPF_PROG_TEST_RUN in the harness of tc_test.go. xlane_config names xl-up0
// as the uplink with 198.51.100.1 and 2001:db8:100::1 as the node's
// (masquerade) addresses; the outside is 203.0.113.0/24 and
// 2001:db8:203::/48 behind the gateway on xl-up0.
//
// Every expected output frame is built anew with gopacket, checksums
// computed from scratch, and compared byte for byte with what the program
// made with its incremental checksum updates; ctChecksums verifies the L3
// and L4 checksums of outputs on its own as well. The expected conntrack
// keys are derived here from what the flow is (ctReply), independently of
// the program's ct_partner.

const (
	passCTFull    = tcXlReasonXL_PASS_CT_FULL
	passNATPorts  = tcXlReasonXL_PASS_NAT_PORTS
	dropNoBackend = tcXlReasonXL_DROP_NO_BACKEND

	ctStNew     = tcCtStateCT_NEW
	ctStEst     = tcCtStateCT_ESTABLISHED
	ctStClosing = tcCtStateCT_CLOSING
	ctStClosed  = tcCtStateCT_CLOSED

	natPortMin, natPortMax = 61000, 65535

	ctTCP   = layers.IPProtocolTCP
	ctUDP   = layers.IPProtocolUDP
	ctICMP  = layers.IPProtocolICMPv4
	ctICMP6 = layers.IPProtocolICMPv6
)

// The timeouts of bpf/lib/ct.h.
const (
	toTCPSyn   = 60 * time.Second
	toTCPEst   = 6 * time.Hour
	toTCPClose = 10 * time.Second
	toUDP      = 30 * time.Second
	toUDPEst   = 180 * time.Second
	toICMP     = 30 * time.Second
)

var (
	nodeV4   = addr("198.51.100.1")
	nodeV6   = addr("2001:db8:100::1")
	remoteV4 = addr("203.0.113.9")
	remoteV6 = addr("2001:db8:203::9")
)

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// nbo is the network-order value a u16 field of a BPF struct holds.
func nbo(v uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))
}

// ---------------------------------------------------------------------------
// Packets.

// ctPkt is one packet of a flow. ICMP: src's port is the echo identifier,
// dst's port is 0.
type ctPkt struct {
	src, dst       netip.AddrPort
	proto          layers.IPProtocol // 0: TCP
	flags          string            // TCP flags: S, A, F, R, P
	echoReply      bool              // ICMP: an echo reply, not a request
	ttl            uint8             // 0: 64
	srcMAC, dstMAC net.HardwareAddr
	exts           []uint8 // IPv6 extension headers (withExts)
}

func (p ctPkt) l4() layers.IPProtocol {
	if p.proto == 0 {
		return ctTCP
	}
	return p.proto
}

func (p ctPkt) isICMP() bool { return p.l4() == ctICMP || p.l4() == ctICMP6 }

// sentBy gives p the MACs of a frame ep's container sends to its gateway.
func (p ctPkt) sentBy(ep endpoint) ctPkt {
	p.srcMAC, p.dstMAC = ep.mac, ep.hostMAC
	return p
}

// fromOutside gives p the MACs of a frame arriving on xl-up0 from the gateway.
func (p ctPkt) fromOutside() ctPkt {
	p.srcMAC, p.dstMAC = gwMAC, upMAC
	return p
}

// routedTo is p as forwarded: new MACs, TTL one less.
func (p ctPkt) routedTo(dst, src net.HardwareAddr) ctPkt {
	p.dstMAC, p.srcMAC = dst, src
	if p.ttl == 0 {
		p.ttl = 64
	}
	p.ttl--
	return p
}

// translated is p with its source (CT_NAT_SRC) or destination (CT_NAT_DST)
// replaced by to. ICMP echo: the identifier is the "port", whichever side.
func (p ctPkt) translated(which CTNat, to netip.AddrPort) ctPkt {
	if p.isICMP() {
		if which == CTNatSrc {
			p.src = to
		} else {
			p.dst = ap(to.Addr(), 0)
			p.src = ap(p.src.Addr(), to.Port())
		}
		return p
	}
	if which == CTNatSrc {
		p.src = to
	} else {
		p.dst = to
	}
	return p
}

var ctPayload = []byte("conntrack payload, odd length!")

func (p ctPkt) frame(tb testing.TB) []byte {
	tb.Helper()
	ttl := p.ttl
	if ttl == 0 {
		ttl = 64
	}
	proto := p.l4()
	var (
		ethType layers.EthernetType
		ip      interface {
			gopacket.NetworkLayer
			gopacket.SerializableLayer
		}
	)
	if p.src.Addr().Is4() {
		ethType = layers.EthernetTypeIPv4
		ip = &layers.IPv4{Version: 4, TTL: ttl, Id: 0x4d2, Flags: layers.IPv4DontFragment, Protocol: proto,
			SrcIP: p.src.Addr().AsSlice(), DstIP: p.dst.Addr().AsSlice()}
	} else {
		ethType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: proto, FlowLabel: 0x12345,
			SrcIP: p.src.Addr().AsSlice(), DstIP: p.dst.Addr().AsSlice()}
	}
	ls := []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: p.srcMAC, DstMAC: p.dstMAC, EthernetType: ethType}, ip}
	switch proto {
	case ctTCP:
		t := &layers.TCP{SrcPort: layers.TCPPort(p.src.Port()), DstPort: layers.TCPPort(p.dst.Port()),
			Seq: 0x1000, Ack: 0x2000, Window: 64240,
			SYN: strings.Contains(p.flags, "S"), ACK: strings.Contains(p.flags, "A"),
			FIN: strings.Contains(p.flags, "F"), RST: strings.Contains(p.flags, "R"),
			PSH: strings.Contains(p.flags, "P")}
		t.SetNetworkLayerForChecksum(ip)
		ls = append(ls, t)
	case ctUDP:
		u := &layers.UDP{SrcPort: layers.UDPPort(p.src.Port()), DstPort: layers.UDPPort(p.dst.Port())}
		u.SetNetworkLayerForChecksum(ip)
		ls = append(ls, u)
	case ctICMP:
		typ := uint8(layers.ICMPv4TypeEchoRequest)
		if p.echoReply {
			typ = layers.ICMPv4TypeEchoReply
		}
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: p.src.Port(), Seq: 3})
	case ctICMP6:
		typ := uint8(layers.ICMPv6TypeEchoRequest)
		if p.echoReply {
			typ = layers.ICMPv6TypeEchoReply
		}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
		ic.SetNetworkLayerForChecksum(ip)
		ls = append(ls, ic, &layers.ICMPv6Echo{Identifier: p.src.Port(), SeqNumber: 3})
	default:
		tb.Fatalf("protocol %v", proto)
	}
	f := serialize(tb, append(ls, gopacket.Payload(ctPayload))...)
	if len(p.exts) > 0 {
		f = withExts(f, p.exts...)
	}
	return f
}

// ctChecksums recomputes the IPv4 header checksum and the TCP, UDP, ICMP
// or ICMPv6 checksum of frame from scratch and reports any mismatch.
func ctChecksums(frame []byte) error {
	if len(frame) < ethHdrLen+20 {
		return errors.New("short frame")
	}
	l3 := frame[ethHdrLen:]
	var (
		proto   byte
		seg     []byte
		pseudo  []byte
		ihl     int
		isIPv4  bool
		payload int
	)
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case uint16(layers.EthernetTypeIPv4):
		isIPv4 = true
		ihl = int(l3[0]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(l3[2:4]))
		if got, want := binary.BigEndian.Uint16(l3[10:12]), ipv4HeaderChecksum(l3[:ihl]); got != want {
			return fmt.Errorf("IPv4 header checksum %#04x, recomputed %#04x", got, want)
		}
		proto, seg = l3[9], l3[ihl:tot]
		payload = len(seg)
		pseudo = append(bytes.Clone(l3[12:20]), 0, proto, byte(payload>>8), byte(payload))
	case uint16(layers.EthernetTypeIPv6):
		plen := int(binary.BigEndian.Uint16(l3[4:6]))
		off := 40
		for proto = l3[6]; proto == 0 || proto == 43 || proto == 60; off += int(l3[off+1]+1) * 8 {
			proto = l3[off] // hop-by-hop, routing, destination options
		}
		seg = l3[off : 40+plen]
		plen = len(seg)
		pseudo = binary.BigEndian.AppendUint32(bytes.Clone(l3[8:40]), uint32(plen))
		pseudo = append(pseudo, 0, 0, 0, proto)
	default:
		return errors.New("not IP")
	}
	var sum uint16
	switch layers.IPProtocol(proto) {
	case ctICMP:
		sum = checksum(seg)
	case ctTCP, ctUDP, ctICMP6:
		if isIPv4 && layers.IPProtocol(proto) == ctUDP && binary.BigEndian.Uint16(seg[6:8]) == 0 {
			return errors.New("UDP checksum 0 (none)")
		}
		sum = checksum(append(pseudo, seg...))
	default:
		return fmt.Errorf("protocol %d", proto)
	}
	if sum != 0 {
		return fmt.Errorf("%v checksum does not verify (residue %#04x)", layers.IPProtocol(proto), sum)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Flows and their conntrack entries.

func ctKeyOf(proto layers.IPProtocol, src, dst netip.AddrPort) CTKey {
	return CTKey{Saddr: src.Addr().As16(), Daddr: dst.Addr().As16(),
		Sport: nbo(src.Port()), Dport: nbo(dst.Port()), Proto: uint8(proto)}
}

func (k CTKey) String() string {
	return fmt.Sprintf("%d %v -> %v", k.Proto,
		ap(netip.AddrFrom16(k.Saddr).Unmap(), nbo(k.Sport)), ap(netip.AddrFrom16(k.Daddr).Unmap(), nbo(k.Dport)))
}

// ctFlow is a flow as its first packet carries it, and the NAT its
// original direction gets.
type ctFlow struct {
	proto    layers.IPProtocol // 0: TCP
	src, dst netip.AddrPort    // ICMP: src port = identifier, dst port 0
	nat      CTNat
	to       netip.AddrPort // NAT target of the original direction
}

func (f ctFlow) l4() layers.IPProtocol { return ctPkt{proto: f.proto}.l4() }

func (f ctFlow) origKey() CTKey { return ctKeyOf(f.l4(), f.src, f.dst) }

// replyEnds is the reply direction's tuple as its packets carry it.
func (f ctFlow) replyEnds() (src, dst netip.AddrPort) {
	switch f.nat {
	case CTNatSrc: // replies come back to the translated source
		src, dst = f.dst, f.to
	case CTNatDst: // replies come from the translated destination
		src, dst = f.to, f.src
	default:
		src, dst = f.dst, f.src
	}
	if p := (ctPkt{proto: f.proto}); p.isICMP() {
		id := f.src.Port()
		if f.nat == CTNatSrc {
			id = f.to.Port()
		}
		src, dst = ap(src.Addr(), id), ap(dst.Addr(), 0)
	}
	return src, dst
}

func (f ctFlow) replyKey() CTKey {
	s, d := f.replyEnds()
	return ctKeyOf(f.l4(), s, d)
}

// orig is a packet of the original direction; reply one of the reply
// direction, as they arrive (before any translation).
func (f ctFlow) orig(flags string) ctPkt {
	return ctPkt{src: f.src, dst: f.dst, proto: f.proto, flags: flags}
}

func (f ctFlow) reply(flags string) ctPkt {
	s, d := f.replyEnds()
	return ctPkt{src: s, dst: d, proto: f.proto, flags: flags, echoReply: true}
}

// replyNAT is what the reply entry does: undo the original's translation.
func (f ctFlow) replyNAT() (CTNat, netip.AddrPort) {
	switch f.nat {
	case CTNatSrc:
		return CTNatDst, f.src
	case CTNatDst:
		return CTNatSrc, f.dst
	}
	return CTNatNone, netip.AddrPort{}
}

func ctNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func (h *harness) ctLookup(k CTKey) (CTVal, bool) {
	var v CTVal
	err := h.objs.CT().Lookup(&k, &v)
	return v, err == nil
}

func (h *harness) ctEntries(tb testing.TB) map[CTKey]CTVal {
	tb.Helper()
	var (
		k   CTKey
		v   CTVal
		out = map[CTKey]CTVal{}
	)
	it := h.objs.CT().Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		tb.Fatalf("iterate xlane_ct: %v", err)
	}
	return out
}

func (h *harness) ctFlush(tb testing.TB) {
	tb.Helper()
	for k := range h.ctEntries(tb) {
		if err := h.objs.CT().Delete(&k); err != nil {
			tb.Fatal(err)
		}
	}
}

// checkFlow verifies both entries of f: each under the key its direction's
// packets carry, with its direction, the flow's state, the translation it
// applies, and a deadline timeout from now. Returns the two values.
func (h *harness) checkFlow(t *testing.T, f ctFlow, state CTState, timeout time.Duration) (orig, reply CTVal) {
	t.Helper()
	now := ctNow()
	ok := true
	check := func(which string, k CTKey, dir uint8, nat CTNat, to netip.AddrPort) CTVal {
		v, found := h.ctLookup(k)
		if !found {
			t.Errorf("%s entry %v missing", which, k)
			ok = false
			return v
		}
		if v.Dir != dir || CTState(v.State) != state || CTNat(v.Nat) != nat {
			t.Errorf("%s entry %v: dir %d state %d nat %d, want dir %d state %d nat %d",
				which, k, v.Dir, v.State, v.Nat, dir, state, nat)
		}
		if nat != CTNatNone {
			if got := ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort)); got != to {
				t.Errorf("%s entry %v translates to %v, want %v", which, k, got, to)
			}
		}
		// The deadline was set at the last packet, just before now.
		if left := time.Duration(int64(v.Expires) - int64(now)); left > timeout || left < timeout-3*time.Second {
			t.Errorf("%s entry %v expires in %v, want %v (ct.h)", which, k, left, timeout)
		}
		return v
	}
	orig = check("original", f.origKey(), uint8(tcCtDirCT_DIR_ORIG), f.nat, f.to)
	rnat, rto := f.replyNAT()
	reply = check("reply", f.replyKey(), uint8(CTDirReply), rnat, rto)
	if ok && orig.Expires != reply.Expires {
		t.Errorf("deadlines differ: original %d, reply %d", orig.Expires, reply.Expires)
	}
	return orig, reply
}

// ---------------------------------------------------------------------------
// Running programs and checking what they did.

// setNode writes xlane_config: xl-up0 is the uplink, masquerade from the
// node's addresses and ports [lo, hi], reply-tuple clashes remapped to
// ports [lo, hi] too (the daemon gives them 1024-65535).
func (h *harness) setNode(tb testing.TB, lo, hi uint16) {
	tb.Helper()
	c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: lo, NatPortMax: hi,
		ClashPortMin: lo, ClashPortMax: hi, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16()}
	if err := h.objs.Config().Put(uint32(0), &c); err != nil {
		tb.Fatal(err)
	}
}

// setMasquerade sets or clears ep's XL_EP_MASQUERADE flag.
func (h *harness) setMasquerade(tb testing.TB, ep endpoint, on bool) {
	tb.Helper()
	h.setEPFlag(tb, ep, EPFlagMasquerade, on) // nopeer_test.go
}

type ctProg int

const (
	progFromEP     ctProg = iota // xlane_from_endpoint
	progFromUplink               // xlane_from_uplink (tcx)
)

// ctRun runs p, arriving on dev, through prog with fresh metrics.
func (h *harness) ctRun(t *testing.T, prog ctProg, dev string, p ctPkt) (ret int32, in, out []byte) {
	t.Helper()
	return h.ctRunFrame(t, prog, dev, p.frame(t))
}

// ctRunFrame runs the frame in, arriving on dev, through prog with fresh
// metrics; it returns the verdict, in and the frame that came out.
func (h *harness) ctRunFrame(t *testing.T, prog ctProg, dev string, in []byte) (int32, []byte, []byte) {
	t.Helper()
	h.resetMetrics(t)
	pr := h.objs.FromEndpoint()
	if prog == progFromUplink {
		pr = h.objs.TCFromUplink()
	}
	ret, out, err := h.runProg(pr, in, h.links[dev])
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return ret, in, out
}

// ctMetric is one expected xlane_metrics entry.
type ctMetric struct {
	ifindex int
	reason  Reason
	dir     Dir
}

// wantMetrics checks xlane_metrics holds exactly one packet of n bytes
// under each of want.
func (h *harness) wantMetrics(t *testing.T, n int, want ...ctMetric) {
	t.Helper()
	w := map[MetricsKey]MetricsVal{}
	for _, c := range want {
		w[metricsKey(c.ifindex, c.reason, c.dir)] = MetricsVal{Packets: 1, Bytes: uint64(n)}
	}
	if got := h.metrics(t); !maps.Equal(got, w) {
		t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(w))
	}
}

// wantFrame checks out is exactly want's frame; the checksums in it are
// verified from scratch too.
func wantFrame(t *testing.T, out []byte, want ctPkt) {
	t.Helper()
	if err := ctChecksums(out); err != nil {
		t.Errorf("output frame: %v", err)
	}
	if w := want.frame(t); !bytes.Equal(out, w) {
		t.Errorf("output frame differs from the expected %v -> %v: %s", want.src, want.dst, frameDiff(out, w))
	}
}

// wantVerdict checks ret and, for verdicts that leave the frame alone,
// that the output is the input.
func wantVerdict(t *testing.T, ret, want int32, in, out []byte) {
	t.Helper()
	if ret != want {
		t.Errorf("return value %d, want %d", ret, want)
	}
	if want != actRedirect && !bytes.Equal(in, out) {
		t.Errorf("frame changed: %s", frameDiff(out, in))
	}
}

// ---------------------------------------------------------------------------
// TCP states, UDP and ICMP echo: flows without translation, container to
// container (epSrc on xl-ep0, epNoFwd on xl-ep1: both directions run
// through xlane_from_endpoint).

func TestCTTCPStates(t *testing.T) {
	h := newHarness(t)
	type step struct {
		name    string
		reply   bool
		flags   string
		state   CTState
		timeout time.Duration
	}
	orig := func(name, flags string, st CTState, to time.Duration) step {
		return step{name, false, flags, st, to}
	}
	reply := func(name, flags string, st CTState, to time.Duration) step {
		return step{name, true, flags, st, to}
	}
	flows := []struct {
		name  string
		steps []step
	}{
		{"handshake and FIN both ways", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			orig("SYN retransmitted", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
			orig("ACK", "A", ctStEst, toTCPEst),
			reply("data", "PA", ctStEst, toTCPEst),
			orig("FIN", "FA", ctStClosing, toTCPClose),
			reply("ACK of FIN", "A", ctStClosing, toTCPClose),
			reply("FIN back", "FA", ctStClosed, toTCPClose),
			orig("last ACK", "A", ctStClosed, toTCPClose),
		}},
		{"FIN first from the reply side", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
			reply("FIN", "FA", ctStClosing, toTCPClose),
			orig("FIN back", "FA", ctStClosed, toTCPClose),
		}},
		{"RST from the reply side answers a SYN", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			reply("RST", "RA", ctStClosed, toTCPClose),
		}},
		{"RST from the originator on an established flow", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
			orig("RST", "R", ctStClosed, toTCPClose),
		}},
		{"RST while closing", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
			orig("FIN", "FA", ctStClosing, toTCPClose),
			reply("RST", "R", ctStClosed, toTCPClose),
		}},
		{"client reuses its port after the close", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
			orig("FIN", "FA", ctStClosing, toTCPClose),
			reply("FIN back", "FA", ctStClosed, toTCPClose),
			orig("new SYN on the same tuple", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
			orig("ACK", "A", ctStEst, toTCPEst),
		}},
		{"a SYN from the reply side does not reopen", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
			orig("RST", "R", ctStClosed, toTCPClose),
			reply("SYN", "S", ctStClosed, toTCPClose),
		}},
		{"reply without ACK is not an answer", []step{
			orig("SYN", "S", ctStNew, toTCPSyn),
			reply("bare SYN (simultaneous open)", "S", ctStNew, toTCPSyn),
			reply("SYN-ACK", "SA", ctStEst, toTCPEst),
		}},
	}
	for fi, fl := range flows {
		for _, fam := range []struct {
			name     string
			src, dst netip.Addr
		}{{"ipv4", epSrc.v4, epNoFwd.v4}, {"ipv6", epSrc.v6, epNoFwd.v6}} {
			f := ctFlow{src: ap(fam.src, uint16(41000+fi)), dst: ap(fam.dst, 80)}
			for _, s := range fl.steps {
				t.Run(fam.name+"/"+fl.name+"/"+s.name, func(t *testing.T) {
					p, dev, to := f.orig(s.flags).sentBy(epSrc), devEP0, epNoFwd
					if s.reply {
						p, dev, to = f.reply(s.flags).sentBy(epNoFwd), devEP1, epSrc
					}
					ret, in, out := h.ctRun(t, progFromEP, dev, p)
					wantVerdict(t, ret, actRedirect, in, out)
					wantFrame(t, out, p.routedTo(to.mac, to.hostMAC))
					h.wantMetrics(t, len(in), ctMetric{h.links[dev], fwdPeer, DirEgress}, ctMetric{h.links[to.dev], fwdPeer, DirIngress})
					h.checkFlow(t, f, s.state, s.timeout)
				})
			}
		}
	}
}

// TestCTCounters: each entry counts the packets and bytes that matched its
// key (abi.h: "packets matching this key"), the first packet of the flow
// included, as `xlane ct ls` shows them.
func TestCTCounters(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.setMasquerade(t, epSrc, true)
	for _, c := range []struct {
		name string
		f    ctFlow
		out  bool // masqueraded through the uplink; reply via xlane_from_uplink
	}{
		{"tcp container to container", ctFlow{src: ap(epSrc.v4, 45000), dst: ap(epNoFwd.v4, 80)}, false},
		{"udp masqueraded", ctFlow{proto: ctUDP, src: ap(epSrc.v4, 45001), dst: ap(remoteV4, 53)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.f
			var want [2]MetricsVal // original, reply
			send := func(reply bool, flags string) {
				t.Helper()
				p, prog, dev := f.orig(flags).sentBy(epSrc), progFromEP, devEP0
				switch {
				case reply && c.out:
					p, prog, dev = f.reply(flags).fromOutside(), progFromUplink, devUp
				case reply:
					p, dev = f.reply(flags).sentBy(epNoFwd), devEP1
				}
				ret, in, _ := h.ctRun(t, prog, dev, p)
				if ret != actRedirect {
					t.Fatalf("ret %d", ret)
				}
				i := map[bool]int{false: 0, true: 1}[reply]
				want[i].Packets++
				want[i].Bytes += uint64(len(in))
				if c.out && f.nat == CTNatNone {
					v, _ := h.ctLookup(f.origKey())
					f.nat, f.to = CTNatSrc, ap(nodeV4, nbo(v.NatPort))
				}
			}
			send(false, "S")
			send(true, "SA")
			send(false, "A")
			send(false, "PA")
			o, r := h.checkFlow(t, f, ctStEst, map[bool]time.Duration{false: toTCPEst, true: toUDPEst}[c.out])
			if got := (MetricsVal{Packets: o.Packets, Bytes: o.Bytes}); got != want[0] {
				t.Errorf("original entry counted %d packets %d bytes, want %d and %d", got.Packets, got.Bytes, want[0].Packets, want[0].Bytes)
			}
			if got := (MetricsVal{Packets: r.Packets, Bytes: r.Bytes}); got != want[1] {
				t.Errorf("reply entry counted %d packets %d bytes, want %d and %d", got.Packets, got.Bytes, want[1].Packets, want[1].Bytes)
			}
		})
	}
}

func TestCTUDPAndEcho(t *testing.T) {
	h := newHarness(t)
	for _, fam := range []struct {
		name     string
		src, dst netip.Addr
		ctICMP   layers.IPProtocol
	}{{"ipv4", epSrc.v4, epNoFwd.v4, ctICMP}, {"ipv6", epSrc.v6, epNoFwd.v6, ctICMP6}} {
		flows := []struct {
			name       string
			f          ctFlow
			first, est time.Duration
		}{
			{"udp", ctFlow{proto: ctUDP, src: ap(fam.src, 40053), dst: ap(fam.dst, 53)}, toUDP, toUDPEst},
			{"icmp echo", ctFlow{proto: fam.ctICMP, src: ap(fam.src, 0x77), dst: ap(fam.dst, 0)}, toICMP, toICMP},
		}
		for _, fl := range flows {
			f := fl.f
			steps := []struct {
				name    string
				reply   bool
				state   CTState
				timeout time.Duration
			}{
				{"first", false, ctStNew, fl.first},
				{"again", false, ctStNew, fl.first},
				{"answer", true, ctStEst, fl.est},
				{"after the answer", false, ctStEst, fl.est},
			}
			for _, s := range steps {
				t.Run(fam.name+"/"+fl.name+"/"+s.name, func(t *testing.T) {
					p, dev, to := f.orig("").sentBy(epSrc), devEP0, epNoFwd
					if s.reply {
						p, dev, to = f.reply("").sentBy(epNoFwd), devEP1, epSrc
					}
					ret, in, out := h.ctRun(t, progFromEP, dev, p)
					wantVerdict(t, ret, actRedirect, in, out)
					wantFrame(t, out, p.routedTo(to.mac, to.hostMAC))
					h.checkFlow(t, f, s.state, s.timeout)
				})
			}
		}
	}
	t.Run("echo keys carry the identifier both ways", func(t *testing.T) {
		// The reply entry of an echo flow is (peer, sender, id, 0): what
		// an echo reply's key is, not the swapped (.., 0, id).
		f := ctFlow{proto: ctICMP, src: ap(epSrc.v4, 0x77), dst: ap(epNoFwd.v4, 0)}
		k := f.replyKey()
		if nbo(k.Sport) != 0x77 || k.Dport != 0 {
			t.Fatalf("test's reply key %v", k)
		}
		if _, ok := h.ctLookup(k); !ok {
			t.Errorf("no entry %v", k)
		}
	})
	t.Run("icmp errors are not tracked", func(t *testing.T) {
		before := len(h.ctEntries(t))
		frame := serialize(t,
			&layers.Ethernet{SrcMAC: epSrc.mac, DstMAC: epSrc.hostMAC, EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, TTL: 64, Protocol: ctICMP, SrcIP: epSrc.v4.AsSlice(), DstIP: epNoFwd.v4.AsSlice()},
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, 3)},
			gopacket.Payload(make([]byte, 28)))
		h.resetMetrics(t)
		ret, _, err := h.runProg(h.objs.FromEndpoint(), frame, h.links[devEP0])
		if err != nil || ret != actRedirect {
			t.Fatalf("ret %d err %v, want a peer redirect", ret, err)
		}
		if after := len(h.ctEntries(t)); after != before {
			t.Errorf("%d entries, was %d: an ICMP error was tracked", after, before)
		}
	})
}

// ---------------------------------------------------------------------------
// Masquerade: epSrc's flows out of the uplink leave from the node's address
// and a port of the range; replies come back through xlane_from_uplink.

func TestCTMasquerade(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.setMasquerade(t, epSrc, true)
	cases := []struct {
		name      string
		f         ctFlow
		first     time.Duration
		est       time.Duration
		node      netip.Addr
		unchanged bool // no gateway MAC: bpf_redirect_neigh fills L2
	}{
		{"ipv4/tcp", ctFlow{proto: ctTCP, src: ap(epSrc.v4, 40000), dst: ap(remoteV4, 80)}, toTCPSyn, toTCPEst, nodeV4, false},
		{"ipv4/udp", ctFlow{proto: ctUDP, src: ap(epSrc.v4, 40000), dst: ap(remoteV4, 53)}, toUDP, toUDPEst, nodeV4, false},
		{"ipv4/icmp echo", ctFlow{proto: ctICMP, src: ap(epSrc.v4, 0x1234), dst: ap(remoteV4, 0)}, toICMP, toICMP, nodeV4, false},
		{"ipv6/tcp", ctFlow{proto: ctTCP, src: ap(epSrc.v6, 40000), dst: ap(remoteV6, 80)}, toTCPSyn, toTCPEst, nodeV6, false},
		{"ipv6/udp", ctFlow{proto: ctUDP, src: ap(epSrc.v6, 40000), dst: ap(remoteV6, 53)}, toUDP, toUDPEst, nodeV6, false},
		{"ipv6/icmp echo", ctFlow{proto: ctICMP6, src: ap(epSrc.v6, 0x1234), dst: ap(remoteV6, 0)}, toICMP, toICMP, nodeV6, false},
		{"ipv4/tcp on-link, neighbour unresolved", ctFlow{proto: ctTCP, src: ap(epSrc.v4, 40001), dst: ap(addr("198.51.100.77"), 80)}, toTCPSyn, toTCPEst, nodeV4, true},
		{"ipv6/tcp on-link, neighbour unresolved", ctFlow{proto: ctTCP, src: ap(epSrc.v6, 40001), dst: ap(addr("2001:db8:100::77"), 80)}, toTCPSyn, toTCPEst, nodeV6, true},
	}
	for _, c := range cases {
		f := c.f
		t.Run(c.name+"/out", func(t *testing.T) {
			p := f.orig("S").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			v, ok := h.ctLookup(f.origKey())
			if !ok {
				t.Fatalf("no entry for %v", f.origKey())
			}
			f.nat, f.to = CTNatSrc, ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
			if f.to.Addr() != c.node || f.to.Port() < natPortMin || f.to.Port() > natPortMax {
				t.Errorf("masqueraded to %v, want %v and a port in %d-%d", f.to, c.node, natPortMin, natPortMax)
			}
			want := p.translated(CTNatSrc, f.to)
			if c.unchanged {
				want = want.routedTo(p.dstMAC, p.srcMAC)
				h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdNeigh, DirEgress})
			} else {
				want = want.routedTo(gwMAC, upMAC)
				h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
			}
			wantFrame(t, out, want)
			h.checkFlow(t, f, ctStNew, c.first)

			t.Run("reply through the uplink", func(t *testing.T) {
				rp := f.reply("SA").fromOutside()
				ret, in, out := h.ctRun(t, progFromUplink, devUp, rp)
				wantVerdict(t, ret, actRedirect, in, out)
				wantFrame(t, out, rp.translated(CTNatDst, f.src).routedTo(epSrc.mac, epSrc.hostMAC))
				h.wantMetrics(t, len(in), ctMetric{h.links[devUp], fwdPeer, DirIngress}, ctMetric{h.links[devEP0], fwdPeer, DirIngress})
				h.checkFlow(t, f, ctStEst, c.est)
			})
			t.Run("next packet keeps the port", func(t *testing.T) {
				p := f.orig("A").sentBy(epSrc)
				ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
				wantVerdict(t, ret, actRedirect, in, out)
				want := p.translated(CTNatSrc, f.to)
				if c.unchanged {
					want = want.routedTo(p.dstMAC, p.srcMAC)
				} else {
					want = want.routedTo(gwMAC, upMAC)
				}
				wantFrame(t, out, want)
				h.checkFlow(t, f, ctStEst, c.est)
			})
		})
	}

	t.Run("not masquerading", func(t *testing.T) {
		h.setMasquerade(t, epSrc, false)
		defer h.setMasquerade(t, epSrc, true)
		f := ctFlow{src: ap(epSrc.v4, 40100), dst: ap(remoteV4, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(gwMAC, upMAC))
		h.checkFlow(t, f, ctStNew, toTCPSyn)
	})
	t.Run("to a local endpoint", func(t *testing.T) {
		f := ctFlow{src: ap(epSrc.v4, 40101), dst: ap(epPeer.v4, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(epPeer.mac, epPeer.hostMAC))
		h.checkFlow(t, f, ctStNew, toTCPSyn)
	})
	t.Run("ports are per destination", func(t *testing.T) {
		// Two ports: a third flow to the same destination finds none free
		// (pass_nat_ports, to Linux unchanged); another destination
		// reuses them.
		h.setNode(t, 62000, 62001)
		defer h.setNode(t, natPortMin, natPortMax)
		used := map[uint16]bool{}
		for i := range 2 {
			f := ctFlow{src: ap(epSrc.v4, uint16(40200+i)), dst: ap(remoteV4, 443)}
			ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
			wantVerdict(t, ret, actRedirect, in, out)
			v, ok := h.ctLookup(f.origKey())
			if !ok {
				t.Fatalf("flow %d not tracked", i)
			}
			used[nbo(v.NatPort)] = true
		}
		if !used[62000] || !used[62001] {
			t.Errorf("two flows got ports %v, want 62000 and 62001", used)
		}
		f := ctFlow{src: ap(epSrc.v4, 40202), dst: ap(remoteV4, 443)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], passNATPorts, DirEgress})
		if _, ok := h.ctLookup(f.origKey()); ok {
			t.Errorf("flow without a port was tracked")
		}
		f = ctFlow{src: ap(epSrc.v4, 40202), dst: ap(remoteV4, 8443)}
		ret, in, out = h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
	})
	t.Run("a closed flow reopened takes another port", func(t *testing.T) {
		// The container's port, closed (RST from outside), opens a new
		// connection to the same destination (ct_reopens): a new flow,
		// masqueraded anew; the old flow's reply entry stays for the GC,
		// keeping its port off new flows (the server's TIME_WAIT is on
		// that tuple: ct_forget).
		f := ctFlow{src: ap(epSrc.v4, 40300), dst: ap(remoteV4, 80)}
		port := func() netip.AddrPort {
			t.Helper()
			ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
			wantVerdict(t, ret, actRedirect, in, out)
			v, ok := h.ctLookup(f.origKey())
			if !ok || CTNat(v.Nat) != CTNatSrc || v.Packets != 1 || CTState(v.State) != ctStNew {
				t.Fatalf("entry %+v (found %v): want a new SNAT flow of one packet", v, ok)
			}
			return ap(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort))
		}
		old := port()
		rp := ctPkt{src: f.dst, dst: old, flags: "R"}.fromOutside()
		ret, in, out := h.ctRun(t, progFromUplink, devUp, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		if v, _ := h.ctLookup(f.origKey()); CTState(v.State) != ctStClosed {
			t.Fatalf("after the RST: state %d, want closed", v.State)
		}
		if now := port(); now == old {
			t.Errorf("the reopened flow took the old flow's port %v", old)
		}
		if v, ok := h.ctLookup(ctKeyOf(ctTCP, f.dst, old)); !ok || v.Dir != uint8(CTDirReply) {
			t.Errorf("the old flow's reply entry (%v -> %v) is gone (%v): its port came free", f.dst, old, ok)
		}
	})
	t.Run("uplink packet of no flow", func(t *testing.T) {
		p := ctPkt{src: ap(remoteV4, 80), dst: ap(nodeV4, 61234), flags: "SA"}.fromOutside()
		ret, in, out := h.ctRun(t, progFromUplink, devUp, p)
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devUp], passNotFwded, DirIngress})
	})
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

// ---------------------------------------------------------------------------
// Services: a VIP's first packet picks a backend through the service's
// Maglev table; conntrack keeps the flow there.

// lbHash is bpf/lib/lb.h's lb_hash over a ct key, as the program computes
// it on a little-endian machine.
func lbHash(k CTKey, flags uint32) uint32 {
	mix := func(h, k uint32) uint32 {
		k *= 0xcc9e2d51
		k = bits.RotateLeft32(k, 15)
		k *= 0x1b873593
		h ^= k
		h = bits.RotateLeft32(h, 13)
		return h*5 + 0xe6546b64
	}
	w := func(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }
	h := uint32(0x7a1e)
	for i := 0; i < 16; i += 4 {
		h = mix(h, w(k.Saddr[i:]))
	}
	if flags&SvcAffinity == 0 {
		h = mix(h, w(k.Daddr[12:]))
		h = mix(h, uint32(k.Sport)<<16|uint32(k.Dport))
		h = mix(h, uint32(k.Proto))
	}
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	return h ^ h>>16
}

// testService is a service as the daemon programs it (datapath/services.go):
// backends under (id, index), a Maglev slot array in xlane_maglev, then
// the VIP in xlane_services.
type testService struct {
	id       uint32
	vip      netip.AddrPort
	proto    layers.IPProtocol
	flags    uint32
	timeout  uint32 // affinity_timeout (seconds), with SvcAffinity
	backends []endpointPort
	slots    []uint32 // backend index per slot; nil: slot i -> i % len(backends)
	size     uint32   // table size when slots is nil (0: DefaultMaglevSize)
}

type endpointPort struct {
	ep   endpoint
	port uint16
}

func (b endpointPort) addr(v4 bool) netip.AddrPort {
	if v4 {
		return ap(b.ep.v4, b.port)
	}
	return ap(b.ep.v6, b.port)
}

func (h *harness) putService(tb testing.TB, s testService) []uint32 {
	tb.Helper()
	size := uint32(DefaultMaglevSize)
	if s.size != 0 {
		size = s.size
	}
	v4 := s.vip.Addr().Is4()
	for i, b := range s.backends {
		k := BackendKey{Service: s.id, Index: uint32(i)}
		a := b.addr(v4)
		v := BackendVal{Addr: a.Addr().As16(), Port: nbo(a.Port())}
		if err := h.objs.Backends().Put(&k, &v); err != nil {
			tb.Fatal(err)
		}
	}
	slots := s.slots
	if slots == nil {
		slots = make([]uint32, size)
		for i := range slots {
			if len(s.backends) == 0 {
				slots[i] = ^uint32(0)
			} else {
				slots[i] = uint32(i % len(s.backends))
			}
		}
	}
	h.putMaglev(tb, s.id, slots)
	k := ServiceKey{Addr: s.vip.Addr().As16(), Port: nbo(s.vip.Port()), Proto: uint8(s.proto)}
	v := ServiceVal{Id: s.id, MaglevSize: uint32(len(slots)), Flags: s.flags, AffinityTimeout: s.timeout}
	if err := h.objs.Services().Put(&k, &v); err != nil {
		tb.Fatal(err)
	}
	return slots
}

// putMaglev installs (or swaps whole) service id's slot array.
func (h *harness) putMaglev(tb testing.TB, id uint32, slots []uint32) {
	tb.Helper()
	inner, err := ebpf.NewMap(MaglevInnerSpec(uint32(len(slots))))
	if err != nil {
		tb.Fatal(err)
	}
	defer inner.Close()
	keys := make([]uint32, len(slots))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, slots, nil); err != nil {
		tb.Fatal(err)
	}
	if err := h.objs.Maglev().Put(id, inner); err != nil {
		tb.Fatal(err)
	}
}

func TestCTService(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	backends := []endpointPort{{epNoFwd, 8080}, {epLo, 8081}, {epPeer, 8082}}
	svcs := []testService{
		{id: 11, vip: ap(addr("10.96.0.10"), 80), proto: ctTCP, backends: backends},
		// Tables of other sizes than the template's (BPF_F_INNER_MAP):
		// the daemon sizes each for its backends.
		{id: 12, vip: ap(addr("10.96.0.10"), 53), proto: ctUDP, backends: backends, size: 65521},
		{id: 13, vip: ap(addr("fd00:96::10"), 80), proto: ctTCP, backends: backends, size: 251},
		{id: 14, vip: ap(addr("10.96.0.11"), 80), proto: ctTCP, backends: backends, flags: SvcAffinity},
	}
	for _, s := range svcs {
		slots := h.putService(t, s)
		v4 := s.vip.Addr().Is4()
		src := epSrc.v6
		if v4 {
			src = epSrc.v4
		}
		name := fmt.Sprintf("%v/%v", s.vip, s.proto)
		if s.flags&SvcAffinity != 0 {
			name += "/affinity"
		}
		t.Run(name, func(t *testing.T) {
			hits := map[int]int{}
			var replied bool
			for i := range 48 {
				// Client ports differ between services: a flow to another VIP
				// from the same port that lands on the same backend would
				// clash (TestCTServiceReplyClash).
				f := ctFlow{proto: s.proto, src: ap(src, uint16(20000+1000*int(s.id)+i*7)), dst: s.vip, nat: CTNatDst}
				idx := int(slots[lbHash(f.origKey(), s.flags)%uint32(len(slots))])
				b := backends[idx]
				f.to = b.addr(v4)
				hits[idx]++
				p := f.orig("S").sentBy(epSrc)
				ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
				wantVerdict(t, ret, actRedirect, in, out)
				wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(b.ep.mac, b.ep.hostMAC))
				h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdPeer, DirEgress}, ctMetric{h.ifindexOf(b.ep), fwdPeer, DirIngress})
				first := toTCPSyn
				if s.proto == ctUDP {
					first = toUDP
				}
				h.checkFlow(t, f, ctStNew, first)
				if t.Failed() {
					t.Fatalf("flow %v -> %v: slot %d, backend %d (%v)", f.src, f.dst, lbHash(f.origKey(), s.flags)%DefaultMaglevSize, idx, f.to)
				}
				if idx == 0 && !replied && s.proto == ctTCP {
					// The backend's answer leaves as the VIP's.
					replied = true
					rp := f.reply("SA").sentBy(epNoFwd)
					ret, in, out := h.ctRun(t, progFromEP, devEP1, rp)
					wantVerdict(t, ret, actRedirect, in, out)
					wantFrame(t, out, rp.translated(CTNatSrc, s.vip).routedTo(epSrc.mac, epSrc.hostMAC))
					h.checkFlow(t, f, ctStEst, toTCPEst)
				}
			}
			if s.flags&SvcAffinity != 0 {
				if len(hits) != 1 {
					t.Errorf("ClientIP affinity: one client reached backends %v, want one", hits)
				}
			} else if len(hits) != len(backends) {
				t.Errorf("48 flows reached backends %v, want all %d", hits, len(backends))
			}
		})
	}

	t.Run("flows keep their backend when the table changes", func(t *testing.T) {
		s := svcs[0]
		type held struct {
			f  ctFlow
			be endpointPort
		}
		var flows []held
		moved := 0
		slots := slotsOf(t, h, s.id)
		for i := range 12 {
			f := ctFlow{src: ap(epSrc.v4, uint16(43000+i)), dst: s.vip, nat: CTNatDst}
			be := backends[slots[lbHash(f.origKey(), 0)%DefaultMaglevSize]]
			f.to = be.addr(true)
			p := f.orig("S").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(be.ep.mac, be.ep.hostMAC))
			flows = append(flows, held{f, be})
			if be.port != 8082 {
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("every flow is on backend 2 already: the test shows nothing")
		}
		// Every slot to backend 2 now (the daemon swaps tables whole).
		all2 := make([]uint32, DefaultMaglevSize)
		for i := range all2 {
			all2[i] = 2
		}
		h.putMaglev(t, s.id, all2)
		for _, fl := range flows {
			p := fl.f.orig("A").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, fl.f.to).routedTo(fl.be.ep.mac, fl.be.ep.hostMAC))
		}
		f := ctFlow{src: ap(epSrc.v4, 43999), dst: s.vip, nat: CTNatDst, to: backends[2].addr(true)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epPeer.mac, epPeer.hostMAC))
	})
}

// slotsOf reads service id's slot array back from xlane_maglev.
func slotsOf(tb testing.TB, h *harness, id uint32) []uint32 {
	tb.Helper()
	var innerID ebpf.MapID
	if err := h.objs.Maglev().Lookup(id, &innerID); err != nil {
		tb.Fatalf("xlane_maglev[%d]: %v", id, err)
	}
	inner, err := ebpf.NewMapFromID(innerID)
	if err != nil {
		tb.Fatal(err)
	}
	defer inner.Close()
	out := make([]uint32, DefaultMaglevSize)
	for i := range out {
		if err := inner.Lookup(uint32(i), &out[i]); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// TestCTServiceReplyClash is in ct_both_test.go (source-port remap).

func TestCTServiceNoBackend(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.putService(t, testService{id: 21, vip: ap(addr("10.96.1.1"), 80), proto: ctTCP})
	h.putService(t, testService{id: 22, vip: ap(addr("fd00:96::1:1"), 80), proto: ctTCP})
	// A backend index with no backend entry behind it.
	h.putService(t, testService{id: 23, vip: ap(addr("10.96.1.3"), 80), proto: ctTCP, slots: make([]uint32, DefaultMaglevSize)})
	// A service whose table is missing altogether.
	k := ServiceKey{Addr: addr("10.96.1.4").As16(), Port: nbo(80), Proto: uint8(ctTCP)}
	if err := h.objs.Services().Put(&k, &ServiceVal{Id: 24, MaglevSize: DefaultMaglevSize}); err != nil {
		t.Fatal(err)
	}
	for _, vip := range []netip.AddrPort{
		ap(addr("10.96.1.1"), 80), ap(addr("fd00:96::1:1"), 80), ap(addr("10.96.1.3"), 80), ap(addr("10.96.1.4"), 80),
	} {
		t.Run(vip.String(), func(t *testing.T) {
			for _, from := range []string{"container", "outside"} {
				p, prog, dev, dir := firstToVIP(ctTCP, vip, from)
				before := len(h.ctEntries(t))
				ret, in, out := h.ctRun(t, prog, dev, p)
				wantVerdict(t, ret, actShot, in, out)
				h.wantMetrics(t, len(in), ctMetric{h.links[dev], dropNoBackend, dir})
				if n := len(h.ctEntries(t)); n != before {
					t.Errorf("%s: %d conntrack entries, was %d", from, n, before)
				}
			}
		})
	}
	t.Run("another port of the VIP is no service", func(t *testing.T) {
		f := ctFlow{src: ap(epSrc.v4, 40000), dst: ap(addr("10.96.1.1"), 81)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actPass, in, out) // no route to 10.96/16 here
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], passNotFwded, DirEgress})
	})
}

// ---------------------------------------------------------------------------
// A full table: a four-entry xlane_ct holds two flows.

// ctEntryCount counts xlane_ct's entries with batch lookups.
func (h *harness) ctEntryCount(tb testing.TB) int {
	tb.Helper()
	keys, vals := make([]CTKey, 4096), make([]CTVal, 4096)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		n, err := h.objs.CT().BatchLookup(&cursor, keys, vals, nil)
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total
		}
		if err != nil {
			tb.Fatalf("count xlane_ct: %v", err)
		}
	}
}

// TestCTTableFull: with xlane_ct full, flows that need no translation are
// forwarded untracked (pass_ct_full counted under ifindex 0 besides their
// own reason); flows that need NAT go to Linux (pass_ct_full) rather than
// out untranslated; tracked flows carry on.
func TestCTTableFull(t *testing.T) {
	// Four entries: two flows fill it. Every collection must take the
	// size (xlaned --ct-size): Load sized only the tc collection's spec
	// once, and the XDP programs then failed to load, silently.
	h := newHarness(t, Options{CTSize: 4})
	if got := h.objs.CT().MaxEntries(); got != 4 {
		t.Fatalf("xlane_ct max_entries %d, want 4", got)
	}
	if err := h.objs.XDPErr(); err != nil {
		t.Fatalf("xdp programs with CTSize 4: %v", err)
	}
	max := int(h.objs.CT().MaxEntries())
	h.setNode(t, natPortMin, natPortMax)
	h.publish(t, ctTCP, 8080, ap(epNoFwd.v4, 80))
	h.putService(t, testService{id: 31, vip: ap(addr("10.96.0.10"), 80), proto: ctTCP, backends: []endpointPort{{epNoFwd, 8080}}})

	// Fill it: one masqueraded flow, one plain one.
	h.setMasquerade(t, epSrc, true)
	masq := ctFlow{src: ap(epSrc.v4, 40000), dst: ap(remoteV4, 80)}
	if ret, _, _ := h.ctRun(t, progFromEP, devEP0, masq.orig("S").sentBy(epSrc)); ret != actRedirect {
		t.Fatalf("masquerade flow: ret %d", ret)
	}
	v, ok := h.ctLookup(masq.origKey())
	if !ok {
		t.Fatal("masquerade flow not tracked")
	}
	masq.nat, masq.to = CTNatSrc, ap(nodeV4, nbo(v.NatPort))
	plain := ctFlow{src: ap(epSrc.v4, 40001), dst: ap(epPeer.v4, 80)}
	if ret, _, _ := h.ctRun(t, progFromEP, devEP0, plain.orig("S").sentBy(epSrc)); ret != actRedirect {
		t.Fatalf("plain flow: ret %d", ret)
	}
	if n := h.ctEntryCount(t); n != max {
		t.Fatalf("%d entries, want %d (full)", n, max)
	}

	t.Run("untranslated local flow is forwarded, counted under ifindex 0", func(t *testing.T) {
		f := ctFlow{src: ap(epSrc.v4, 40002), dst: ap(epPeer.v4, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(epPeer.mac, epPeer.hostMAC))
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdPeer, DirEgress}, ctMetric{epPeer.ifindex, fwdPeer, DirIngress},
			ctMetric{0, passCTFull, DirEgress})
	})
	t.Run("untranslated routed flow is forwarded, counted under ifindex 0", func(t *testing.T) {
		h.setMasquerade(t, epSrc, false)
		defer h.setMasquerade(t, epSrc, true)
		f := ctFlow{src: ap(epSrc.v6, 40003), dst: ap(remoteV6, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(gwMAC, upMAC))
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress}, ctMetric{0, passCTFull, DirEgress})
	})
	for _, c := range []struct {
		name string
		f    ctFlow
	}{
		{"new masquerade flow goes to Linux, not out untranslated", ctFlow{src: ap(epSrc.v4, 40004), dst: ap(remoteV4, 80)}},
		{"new published-port flow goes to Linux", ctFlow{src: ap(epSrc.v4, 40005), dst: ap(nodeV4, 8080)}},
		{"new service flow goes to Linux", ctFlow{src: ap(epSrc.v4, 40006), dst: ap(addr("10.96.0.10"), 80)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ret, in, out := h.ctRun(t, progFromEP, devEP0, c.f.orig("S").sentBy(epSrc))
			wantVerdict(t, ret, actPass, in, out)
			h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], passCTFull, DirEgress})
		})
	}
	t.Run("new published-port flow from outside goes to Linux", func(t *testing.T) {
		f := ctFlow{src: ap(remoteV4, 40007), dst: ap(nodeV4, 8080)}
		ret, in, out := h.ctRun(t, progFromUplink, devUp, f.orig("S").fromOutside())
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devUp], passCTFull, DirIngress})
	})
	t.Run("tracked flows still translate", func(t *testing.T) {
		p := masq.orig("A").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.translated(CTNatSrc, masq.to).routedTo(gwMAC, upMAC))
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
		rp := masq.reply("A").fromOutside()
		ret, in, out = h.ctRun(t, progFromUplink, devUp, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, rp.translated(CTNatDst, masq.src).routedTo(epSrc.mac, epSrc.hostMAC))
		h.checkFlow(t, masq, ctStEst, toTCPEst)
	})
	t.Run("room again after a flow goes", func(t *testing.T) {
		for _, k := range []CTKey{plain.origKey(), plain.replyKey()} {
			if err := h.objs.CT().Delete(&k); err != nil {
				t.Fatalf("delete %v: %v", k, err)
			}
		}
		f := ctFlow{src: ap(epSrc.v4, 40004), dst: ap(remoteV4, 80)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
		if n := h.ctEntryCount(t); n != max {
			t.Errorf("%d entries, want %d", n, max)
		}
		if _, ok := h.ctLookup(f.origKey()); !ok {
			t.Errorf("new flow not tracked")
		}
	})
}
