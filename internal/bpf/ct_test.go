package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/bpf/bpftest"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// Conntrack, NAT and service tests of xlane_from_endpoint (tcx ingress of a
// host veth) and xlane_from_uplink (tcx ingress of the uplink), run with
// BPF_PROG_TEST_RUN in the harness of harness_test.go (the topology of
// tc_test.go). This file holds the conntrack harness (packets, flows,
// running and checking) and the tables of flows without translation; the
// other stages' tables are next to it: nat_test.go (masquerade),
// publish_test.go (published ports, NodePorts), lb_test.go (services),
// ct_full_test.go (a full table). xlane_config names xl-up0
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
	f := bpftest.Frame{SrcMAC: p.srcMAC, DstMAC: p.dstMAC, Src: p.src, Dst: p.dst, Proto: p.l4(),
		TTL: p.ttl, ID: 0x4d2, DF: true, FlowLabel: 0x12345, TCPFlags: p.flags, Seq: 0x1000, Ack: 0x2000,
		EchoReply: p.echoReply, EchoSeq: 3, Payload: ctPayload}
	if p.src.Addr().Is6() {
		f.ID, f.DF = 0, false
	}
	b := f.Bytes(tb)
	if len(p.exts) > 0 {
		b = withExts(b, p.exts...)
	}
	return b
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
		frame := bpftest.Serialize(t,
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
