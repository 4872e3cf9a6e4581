package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/bpf/bpftest"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// Tests for xlane_from_endpoint, run with BPF_PROG_TEST_RUN: this file
// holds the topology every harness builds (harness_test.go), the frames
// (pktSpec, over bpftest.Frame) and the tables of delivery to a local
// endpoint; each stage's tables are in a file of its own: parse_test.go,
// admit_test.go, fib_test.go, ct_test.go (and nat_test.go, publish_test.go,
// lb_test.go, ct_full_test.go), fw_test.go; the XDP twins' in xdp_test.go.
//
// Every run happens inside a private network namespace built by the test
// (newHarness), so the FIB lookups the program does see routes, neighbours
// and forwarding sysctls the test controls, never the host's:
//
//	lo       ifindex 1; the skb's device when a run has no context
//	xl-ep0   host side of the sending endpoint's veth (epSrc)
//	xl-ep1   host side of an endpoint's veth with forwarding disabled (epNoFwd)
//	xl-up0   uplink: 198.51.100.1/24, 2001:db8:100::1/64
//	         203.0.113.0/24 and 2001:db8:203::/48 via a gateway with a
//	         permanent neighbour entry; 192.0.2.0/24 and 2001:db8:bad::/48
//	         are blackholes; there is no default route.
//
// In a test run bpf_redirect_peer, bpf_redirect and bpf_redirect_neigh only
// record the target and return TC_ACT_REDIRECT, so peer endpoints can live on
// made-up ifindexes. Frames BPF_PROG_TEST_RUN refuses to run go through the
// real datapath instead: TestFromEndpointTruncated attaches the program to
// xl-ep0 with tcx and sends them from the veth's other end.

const (
	actPass     int32 = -1 // TC_ACT_UNSPEC
	actShot     int32 = 2  // TC_ACT_SHOT
	actRedirect int32 = 7  // TC_ACT_REDIRECT

	ethHdrLen = 14
	maxFrame  = 1514 // fuzz inputs are cut to one MTU-sized frame

	devEP0 = "xl-ep0"
	devEP1 = "xl-ep1"
	devUp  = "xl-up0"
	devLo  = "lo"
)

const (
	fwdPeer       = tcXlReasonXL_FWD_PEER
	fwdFIB        = tcXlReasonXL_FWD_FIB
	fwdNeigh      = tcXlReasonXL_FWD_NEIGH
	passNonIP     = tcXlReasonXL_PASS_NON_IP
	passNotFwded  = tcXlReasonXL_PASS_NOT_FWDED
	passLinkLocal = tcXlReasonXL_PASS_LINK_LOCAL
	passTTL       = tcXlReasonXL_PASS_TTL
	passNoRoute   = tcXlReasonXL_PASS_NO_ROUTE
	dropMalformed = tcXlReasonXL_DROP_MALFORMED
	dropSpoofed   = tcXlReasonXL_DROP_SPOOFED
	dropVLAN      = tcXlReasonXL_DROP_VLAN
)

// endpoint is a container as xlane_endpoints knows it.
type endpoint struct {
	dev          string // host-side device in the test netns, or ""
	ifindex      int    // used when dev is "": a peer that needs no device
	v4, v6       netip.Addr
	mac, hostMAC net.HardwareAddr
}

var (
	ep0MAC = mac("02:00:00:00:00:10")
	ep1MAC = mac("02:00:00:00:00:11")
	upMAC  = mac("02:00:00:00:00:20")
	gwMAC  = mac("02:00:00:00:00:99")

	// epSrc sends almost every test frame, through xl-ep0.
	epSrc = endpoint{dev: devEP0, v4: addr("10.0.0.2"), v6: addr("fd00::2"),
		mac: mac("02:00:00:0a:00:02"), hostMAC: ep0MAC}
	// epPeer is another local endpoint: the peer-redirect target.
	epPeer = endpoint{ifindex: 4242, v4: addr("10.0.0.3"), v6: addr("fd00::3"),
		mac: mac("02:00:00:0a:00:03"), hostMAC: mac("02:00:00:00:10:92")}
	// epOther lives on another veth: epSrc must not use its addresses.
	epOther = endpoint{ifindex: 4343, v4: addr("10.0.0.4"), v6: addr("fd00::4"),
		mac: mac("02:00:00:0a:00:04"), hostMAC: mac("02:00:00:00:10:f7")}
	// epNoFwd sits on a veth with forwarding disabled.
	epNoFwd = endpoint{dev: devEP1, v4: addr("10.0.1.2"), v6: addr("fd00:1::2"),
		mac: mac("02:00:00:0a:01:02"), hostMAC: ep1MAC}
	// epLo is registered on loopback, the device of context-less runs
	// (prog.Benchmark cannot pass a context). Without a MAC (as a netkit
	// L3 endpoint): prog.Benchmark repeats a frame each run rewrote, whose
	// source MAC is then no endpoint's.
	epLo = endpoint{dev: devLo, v4: addr("10.0.9.2"), v6: addr("fd00:9::2"),
		mac: mac("00:00:00:00:00:00"), hostMAC: mac("02:00:00:00:10:01")}

	endpoints = []endpoint{epSrc, epPeer, epOther, epNoFwd, epLo}
)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func prefix(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// ---------------------------------------------------------------------------
// Frames.

// pktSpec describes a frame epSrc's container sends to its gateway.
type pktSpec struct {
	src, dst netip.Addr
	proto    layers.IPProtocol // TCP (default), UDP, ICMPv4/ICMPv6
	ttl      uint8             // TTL or hop limit; 0 means 64
	id       uint16            // IPv4 identification
	ipOpt    bool              // IPv4 router-alert option (ihl 6)
	vlan     uint16            // non-zero: 802.1Q tag
	pad      int               // Ethernet trailer bytes after the IP packet
	payload  []byte            // L4 payload; nil means the default payload
}

var payload = []byte("xlane payload: must arrive byte for byte")

func (s pktSpec) frame(tb testing.TB) []byte {
	tb.Helper()
	// From the MAC of the endpoint that owns the source (anti-spoofing
	// checks it), epSrc's for any other source.
	smac := epSrc.mac
	for _, ep := range endpoints {
		if ep.v4 == s.src || ep.v6 == s.src {
			smac = ep.mac
		}
	}
	f := bpftest.Frame{SrcMAC: smac, DstMAC: epSrc.hostMAC, VLAN: s.vlan,
		Src: ap(s.src, 40000), Dst: ap(s.dst, 80), Proto: s.proto, TTL: s.ttl,
		ID: s.id, RouterAlert: s.ipOpt, TCPFlags: "S", Seq: 1, Payload: s.payload, Pad: s.pad}
	switch f.L4() {
	case layers.IPProtocolUDP:
		f.Dst = ap(s.dst, 53)
	case layers.IPProtocolICMPv4, layers.IPProtocolICMPv6:
		f.Src, f.EchoSeq = ap(s.src, 7), 1
	}
	if f.Payload == nil {
		f.Payload = payload
	}
	return f.Bytes(tb)
}

// tcp4 and tcp6 are the common case: epSrc to dst over TCP.
func tcp4(tb testing.TB, dst netip.Addr) []byte { return pktSpec{src: epSrc.v4, dst: dst}.frame(tb) }
func tcp6(tb testing.TB, dst netip.Addr) []byte { return pktSpec{src: epSrc.v6, dst: dst}.frame(tb) }

// edit returns a copy of frame changed by fn.
func edit(frame []byte, fn func(b []byte)) []byte {
	b := bytes.Clone(frame)
	fn(b)
	return b
}

// checksum is the RFC 1071 Internet checksum of b, computed from scratch.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// frameDiff shows got against want, whole if short, else around the first
// difference.
func frameDiff(got, want []byte) string {
	if len(got) <= 128 && len(want) <= 128 {
		return fmt.Sprintf("\n got % x\nwant % x", got, want)
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(i-16, 0)
	window := func(b []byte) []byte { return b[min(from, len(b)):min(from+64, len(b))] }
	return fmt.Sprintf("%d bytes, want %d; first difference at byte %d; from byte %d:\n got % x\nwant % x",
		len(got), len(want), i, from, window(got), window(want))
}

// ipv4HeaderChecksum is what the checksum field of hdr should hold.
func ipv4HeaderChecksum(hdr []byte) uint16 {
	return checksum(edit(hdr, func(h []byte) { h[10], h[11] = 0, 0 }))
}

func peerRedirectCases(tb testing.TB) []verdictCase {
	var cases []verdictCase
	for _, fam := range []struct {
		name     string
		src, dst netip.Addr
		icmp     layers.IPProtocol
	}{
		{"ipv4", epSrc.v4, epPeer.v4, layers.IPProtocolICMPv4},
		{"ipv6", epSrc.v6, epPeer.v6, layers.IPProtocolICMPv6},
	} {
		specs := map[string]pktSpec{
			"tcp":              {proto: layers.IPProtocolTCP},
			"udp":              {proto: layers.IPProtocolUDP},
			"icmp":             {proto: fam.icmp},
			"ttl 2":            {ttl: 2},
			"ttl 255":          {ttl: 255},
			"ethernet padding": {pad: 9},
		}
		if fam.src.Is4() {
			specs["ip options"] = pktSpec{ipOpt: true}
		}
		for _, name := range slices.Sorted(maps.Keys(specs)) {
			s := specs[name]
			s.src, s.dst = fam.src, fam.dst
			cases = append(cases, verdictCase{fam.name + "/" + name, devEP0, s.frame(tb), toPeer(epPeer)})
		}
	}
	return cases
}

func TestFromEndpointPeerRedirect(t *testing.T) { runCases(t, peerRedirectCases(t)) }

// TestSkbIfindex pins down what skb->ifindex is in a test run: the device
// named by the context's ifindex, loopback without a context. The metrics
// key of a passed ARP frame shows what the program saw.
func TestSkbIfindex(t *testing.T) {
	h := newHarness(t)
	arp := nonIPCases(t)[0].frame
	for _, tc := range []struct {
		name    string
		ctx     int // context ifindex, 0 for none
		wantDev string
	}{
		{"no context", 0, devLo},
		{"loopback", 1, devLo},
		{devEP0, h.links[devEP0], devEP0},
		{devUp, h.links[devUp], devUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantDev == devLo && h.links[devLo] != 1 {
				t.Fatalf("loopback has ifindex %d, want 1", h.links[devLo])
			}
			h.resetMetrics(t)
			if _, _, err := h.run(arp, tc.ctx); err != nil {
				t.Fatal(err)
			}
			want := map[MetricsKey]MetricsVal{
				metricsKey(h.links[tc.wantDev], passNonIP, DirEgress): {Packets: 1, Bytes: uint64(len(arp))},
			}
			if got := h.metrics(t); !maps.Equal(got, want) {
				t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(want))
			}
		})
	}
	t.Run("unknown ifindex", func(t *testing.T) {
		if _, _, err := h.run(arp, 9999); !errors.Is(err, unix.ENODEV) {
			t.Errorf("run on ifindex 9999: %v, want ENODEV", err)
		}
	})
}

// TestIPv4ChecksumCarry drives the incremental checksum update through every
// original checksum whose high byte overflows when TTL goes down by one
// (0xfe00-0xfffe) and a few others, comparing against a from-scratch sum.
func TestIPv4ChecksumCarry(t *testing.T) {
	h := newHarness(t)
	base := tcp4(t, epPeer.v4)
	hdr := func(b []byte) []byte { return b[ethHdrLen : ethHdrLen+20] }

	// The identification field picks the checksum: find one per checksum.
	idFor := map[uint16]uint16{}
	for id := range 1 << 16 {
		b := edit(hdr(base), func(h []byte) { binary.BigEndian.PutUint16(h[4:], uint16(id)) })
		if c := ipv4HeaderChecksum(b); idFor[c] == 0 {
			idFor[c] = uint16(id)
		}
	}
	targets := []uint16{0x0000, 0x0001, 0x00ff, 0x0100, 0x7fff, 0x8000, 0xfdff}
	for c := 0xfe00; c < 0xffff; c++ {
		targets = append(targets, uint16(c))
	}
	for _, c := range targets {
		id, ok := idFor[c]
		if !ok {
			t.Fatalf("no identification gives checksum %#04x", c)
		}
		frame := edit(base, func(b []byte) {
			binary.BigEndian.PutUint16(hdr(b)[4:], id)
			binary.BigEndian.PutUint16(hdr(b)[10:], c)
		})
		ret, out, err := h.run(frame, h.links[devEP0])
		if err != nil || ret != actRedirect {
			t.Fatalf("checksum %#04x: ret %d, err %v", c, ret, err)
		}
		checkForwarded(t, frame, out, epPeer.mac, epPeer.hostMAC)
		if t.Failed() {
			t.Fatalf("original checksum %#04x", c)
		}
	}
}

// allFrames are the table frames, the seed corpus of the fuzz test.
func allFrames(tb testing.TB) [][]byte {
	var frames [][]byte
	for _, cases := range [][]verdictCase{
		peerRedirectCases(tb), spoofCases(tb), linkScopeCases(tb), ttlCases(tb),
		nonIPCases(tb), malformedCases(tb), l4MalformedCases(tb), truncatedCases(tb), fibCases(tb),
	} {
		for _, c := range cases {
			frames = append(frames, c.frame)
		}
	}
	return frames
}

// fuzzReason checks the counters of one fuzzed run of a from-endpoint
// program on ifindex (prefix starts its failures): exactly one egress key
// there, one packet of the frame's length, an ingress packet only for a
// peer redirect. It returns the reason counted.
func fuzzReason(t *testing.T, prefix string, ifindex int, frame []byte, m map[MetricsKey]MetricsVal) Reason {
	t.Helper()
	var egress []MetricsKey
	var ingress uint64
	for k, v := range m {
		if Dir(k.Dir) == DirEgress {
			egress = append(egress, k)
		} else {
			ingress += v.Packets
		}
	}
	if len(egress) != 1 || egress[0].Ifindex != uint32(ifindex) {
		t.Fatalf("%swant one egress key on ifindex %d, got %s", prefix, ifindex, formatMetrics(m))
	}
	k := egress[0]
	if v := m[k]; v != (MetricsVal{Packets: 1, Bytes: uint64(len(frame))}) {
		t.Fatalf("%segress count %d packets %d bytes, want 1 packet %d bytes", prefix, v.Packets, v.Bytes, len(frame))
	}
	reason := Reason(k.Reason)
	wantIngress := uint64(0)
	if reason == fwdPeer {
		wantIngress = 1
	}
	if ingress != wantIngress {
		t.Fatalf("%sreason %s with %d ingress packets counted: %s", prefix, reason, ingress, formatMetrics(m))
	}
	return reason
}

// FuzzFromEndpoint feeds arbitrary frames arriving on xl-ep0. Whatever the
// input, the program must give a tc verdict consistent with the single
// reason it counts, count exactly one packet of the frame's length (plus the
// receiving side for a peer redirect), and leave frames it does not forward
// unchanged.
func FuzzFromEndpoint(f *testing.F) {
	h := newHarness(f)
	for _, frame := range allFrames(f) {
		f.Add(frame)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) > maxFrame {
			frame = frame[:maxFrame]
		}
		h.resetMetrics(t)
		ifindex := h.links[devEP0]
		ret, out, err := h.run(frame, ifindex)
		m := h.metrics(t)
		if err != nil {
			if !testRunRefuses(frame) || !errors.Is(err, unix.EINVAL) {
				t.Fatalf("run: %v", err)
			}
			if len(m) != 0 {
				t.Fatalf("refused frame counted: %s", formatMetrics(m))
			}
			return
		}

		reason := fuzzReason(t, "", ifindex, frame, m)

		var wantRet int32
		switch {
		case reason.IsDrop():
			wantRet = actShot
		case reason <= fwdNeigh:
			wantRet = actRedirect
		default:
			wantRet = actPass
		}
		if ret != wantRet {
			t.Fatalf("return value %d with reason %s, want %d", ret, reason, wantRet)
		}
		if ret != actRedirect && !bytes.Equal(out, frame) {
			t.Fatalf("frame changed with verdict %s:\n got % x\nwant % x", reason, out, frame)
		}
	})
}

// BenchmarkFromEndpoint measures the peer-redirect path, loopback as the
// sending device (prog.Benchmark passes no context). The kernel reruns the
// program on the same skb, so every rewrite accumulates: TTL 255 allows 254
// redirects before the run would turn into pass_ttl. The benchmark therefore
// runs in batches and checks the last run of each batch still redirected.
func BenchmarkFromEndpoint(b *testing.B) {
	h := newHarness(b)
	frame := pktSpec{src: epLo.v4, dst: epPeer.v4, ttl: 255}.frame(b)
	benchBatched(b, h, h.objs.FromEndpoint(), frame, 250, actRedirect)
}

// benchBatched runs prog on frame b.N times in h's netns, batch runs per
// BPF_PROG_TEST_RUN call, fails unless the last run of each call returned
// want, and reports the kernel's own ns per run (without syscall and netns
// switching) as ns/op.
func benchBatched(b *testing.B, h *harness, prog *ebpf.Program, frame []byte, batch int, want int32) {
	b.Helper()
	var total time.Duration
	b.ResetTimer()
	err := h.do(func() error {
		for done := 0; done < b.N; done += batch {
			n := min(batch, b.N-done)
			ret, perRun, err := prog.Benchmark(frame, n, nil)
			if err != nil {
				return err
			}
			if int32(ret) != want {
				return fmt.Errorf("return value %d, want %d", int32(ret), want)
			}
			total += perRun * time.Duration(n)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
}
