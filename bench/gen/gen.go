package gen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// FrameLen is the length of the generated frames: a 64-byte Ethernet frame
// (the usual "64-byte packet") without its 4-byte FCS, which software never
// sees: 14 Ethernet + 20 IPv4 + 8 UDP + 18 payload.
const FrameLen = 60

// Flow is the UDP flow the generator sends and the counter matches.
type Flow struct {
	DstMAC, SrcMAC   net.HardwareAddr
	Src, Dst         netip.Addr // IPv4
	SrcPort, DstPort uint16
	TTL              uint8
	// Flows > 1: the generator cycles the source port over SrcPort,
	// SrcPort+1, ..., SrcPort+Flows-1, one step per frame (per CPU), so
	// consecutive frames are different flows; 0 or 1: one flow. The
	// counter and the bounce program match any source port.
	Flows uint16
}

// Frame builds the FrameLen-byte frame of f. The IPv4 header checksum is
// complete; the UDP checksum field holds only the pseudo-header sum, as a
// container socket with TX checksum offload leaves it (CHECKSUM_PARTIAL),
// so a datapath that must complete checksums pays for it here too.
func (f Flow) Frame() ([]byte, error) {
	if len(f.DstMAC) != 6 || len(f.SrcMAC) != 6 || !f.Src.Is4() || !f.Dst.Is4() {
		return nil, errors.New("flow: want 6-byte MACs and IPv4 addresses")
	}
	b := make([]byte, FrameLen)
	copy(b[0:6], f.DstMAC)
	copy(b[6:12], f.SrcMAC)
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IP)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], FrameLen-14) // total length 46
	binary.BigEndian.PutUint16(ip[4:], 0x4242)      // id
	binary.BigEndian.PutUint16(ip[6:], 0x4000)      // DF
	ip[8] = f.TTL
	ip[9] = unix.IPPROTO_UDP
	src, dst := f.Src.As4(), f.Dst.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum16(ip)))
	udp := b[34:]
	binary.BigEndian.PutUint16(udp[0:], f.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], f.DstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], "xlane-bench-64B!!!")
	// Pseudo-header sum, not complemented: what the kernel puts in the
	// field for CHECKSUM_PARTIAL (udp4_hwcsum's ~csum_tcpudp_magic).
	ps := sum16(src[:]) + sum16(dst[:]) + unix.IPPROTO_UDP + uint32(len(udp))
	binary.BigEndian.PutUint16(udp[6:], fold(ps))
	return b, nil
}

// sum16 adds b as big-endian 16-bit words (one's complement, unfolded).
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// Objects are the loaded programs and maps for one flow.
type Objects struct {
	objs xdpgenObjects
}

// Source is how the generated packets leave the sending container.
type Source int

const (
	// Frames: XDP_TX; xdp_frames go out of eth0 (ndo_xdp_xmit) into the
	// host veth's NAPI ring, with no skb on the sending side.
	Frames Source = iota
	// SKBs: XDP_PASS; BPF_PROG_RUN builds an skb received on eth0, which
	// the bounce program (AttachBounce) sends out of eth0: the host veth
	// gets skbs, as from a container's socket.
	SKBs
)

func (s Source) String() string {
	if s == SKBs {
		return "skb"
	}
	return "xdp-frame"
}

func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *Source) UnmarshalText(b []byte) error {
	switch string(b) {
	case "skb":
		*s = SKBs
	case "xdp-frame", "":
		*s = Frames
	default:
		return fmt.Errorf("source %q: want skb or xdp-frame", b)
	}
	return nil
}

// Load loads the programs with the frame of f as the generator's template
// and f as what the counter (and the bounce program) match.
func Load(f Flow, src Source) (*Objects, error) {
	if f.Flows > 1 && int(f.SrcPort)+int(f.Flows)-1 > 0xffff {
		return nil, fmt.Errorf("flow: source ports %d + %d flows past 65535", f.SrcPort, f.Flows)
	}
	frame, err := f.Frame()
	if err != nil {
		return nil, err
	}
	spec, err := loadXdpgen()
	if err != nil {
		return nil, err
	}
	var words [8]uint64
	for i := range words {
		var w [8]byte
		copy(w[:], frame[min(i*8, len(frame)):min(i*8+8, len(frame))])
		words[i] = binary.NativeEndian.Uint64(w[:]) // memory order, as the program copies it
	}
	be16 := func(v uint16) uint16 { // network order as the program compares it
		var b [2]byte
		binary.BigEndian.PutUint16(b[:], v)
		return binary.NativeEndian.Uint16(b[:])
	}
	be32 := func(a netip.Addr) uint32 {
		b := a.As4()
		return binary.NativeEndian.Uint32(b[:])
	}
	for name, v := range map[string]any{
		"gen_frame":      words,
		"match_saddr":    be32(f.Src),
		"match_daddr":    be32(f.Dst),
		"match_dport":    be16(f.DstPort),
		"match_sent_ttl": f.TTL,
		"gen_flows":      uint32(f.Flows),
		"gen_sport":      f.SrcPort,
		"gen_verdict":    map[Source]uint32{Frames: 3, SKBs: 2}[src], // XDP_TX, XDP_PASS
	} {
		vs, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("load generator: variable %s missing", name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("load generator: set %s: %w", name, err)
		}
	}
	o := &Objects{}
	if err := spec.LoadAndAssign(&o.objs, nil); err != nil {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	return o, nil
}

func (o *Objects) Close() error { return o.objs.Close() }

// xdpMd is struct xdp_md as BPF_PROG_RUN takes it: data_end must be the
// frame length; ingress_ifindex names the device the frames come in on
// (and, for XDP_TX, leave by).
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// MaxBatch is the largest batch BPF_PROG_RUN takes in live-frames mode
// (the kernel's TEST_XDP_MAX_BATCH); DefaultBatch is what it uses when
// asked for none (NAPI_POLL_WEIGHT).
const (
	MaxBatch     = 256
	DefaultBatch = 64
)

// Generate runs the generator repeat times on live frames: every frame is
// transmitted out of ifindex (in the calling thread's network namespace),
// as a frame or, via an skb and the bounce program, as an skb.
//
// batch (1..MaxBatch; 0 is DefaultBatch) is how many frames the kernel
// runs the program on before it flushes them to the device: one
// ndo_xdp_xmit per 16 frames (the bulk queue), but one flush, and so at
// most one wake-up of the receiving veth's NAPI, per batch.
//
// cilium/ebpf restarts a run interrupted by a signal, so the number of
// frames sent is Counters().Offered, not repeat.
func (o *Objects) Generate(ifindex int, repeat, batch uint32) error {
	if batch > MaxBatch {
		return fmt.Errorf("generate: batch %d: want at most %d", batch, MaxBatch)
	}
	frame := make([]byte, FrameLen) // contents irrelevant: the program writes the frame
	_, err := o.objs.XlbGen.Run(&ebpf.RunOptions{
		Data:      frame,
		Repeat:    repeat,
		Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		BatchSize: batch,
		Context:   xdpMd{DataEnd: FrameLen, IngressIfindex: uint32(ifindex)},
	})
	return err
}

// AttachAnchor attaches the generator program as generic XDP to ifindex,
// a device that receives nothing, for the length of a run. Not
// to run it there: BPF_PROG_RUN of an XDP program registers it with the
// kernel's XDP dispatcher at the start of every call and removes it at the
// end, and each change waits for an RCU grace period (two per call,
// bpf_dispatcher_change_prog); a program attached to a device stays
// registered, so the calls change nothing and wait for nothing. Under
// load a grace period takes long enough to leave the generator asleep
// most of the run.
func (o *Objects) AttachAnchor(ifindex int) (link.Link, error) {
	l, err := link.AttachXDP(link.XDPOptions{Program: o.objs.XlbGen, Interface: ifindex, Flags: link.XDPGenericMode})
	if err != nil {
		return nil, fmt.Errorf("attach generator as generic XDP (dispatcher anchor): %w", err)
	}
	return l, nil
}

// AttachCounter attaches the counter to tcx ingress of ifindex (in the
// calling thread's network namespace). Closing the link detaches it.
func (o *Objects) AttachCounter(ifindex int) (link.Link, error) {
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: o.objs.XlbCount, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return nil, fmt.Errorf("attach counter: %w", err)
	}
	return l, nil
}

// AttachBounce attaches the bounce program to tcx ingress of ifindex, the
// generator's device, for the SKBs source.
func (o *Objects) AttachBounce(ifindex int) (link.Link, error) {
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: o.objs.XlbBounce, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return nil, fmt.Errorf("attach bounce: %w", err)
	}
	return l, nil
}

// AttachTracepoints attaches the XDP drop meters (machine-wide).
func (o *Objects) AttachTracepoints() ([]link.Link, error) {
	var ls []link.Link
	for name, p := range map[string]*ebpf.Program{
		"xdp_devmap_xmit":  o.objs.XlbDevmapXmit,
		"xdp_redirect_err": o.objs.XlbRedirectErr,
	} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: p})
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("attach raw tracepoint %s: %w", name, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// Counters are the generator's and the counter's totals.
type Counters struct {
	Offered  uint64 // frames the generator sent (XDP_TX)
	Received uint64 // generator frames counted on the receiver's eth0
	Routed   uint64 // ... with the TTL decremented
	BadIPSum uint64 // ... with a wrong IPv4 header checksum
	// ReceivedBytes are the received frames' bytes (a GSO packet
	// counts once in Received, with all its bytes here).
	ReceivedBytes uint64
}

// Counters sums the per-CPU counters.
func (o *Objects) Counters() (Counters, error) {
	get := func(k xdpgenXlbCounter) (uint64, error) {
		var per []uint64
		if err := o.objs.XlbCounters.Lookup(uint32(k), &per); err != nil {
			return 0, fmt.Errorf("read counter %d: %w", k, err)
		}
		var s uint64
		for _, v := range per {
			s += v
		}
		return s, nil
	}
	var c Counters
	var errs [5]error
	c.Offered, errs[0] = get(xdpgenXlbCounterXLB_OFFERED)
	c.Received, errs[1] = get(xdpgenXlbCounterXLB_RECEIVED)
	c.Routed, errs[2] = get(xdpgenXlbCounterXLB_ROUTED)
	c.BadIPSum, errs[3] = get(xdpgenXlbCounterXLB_BAD_IPCSUM)
	c.ReceivedBytes, errs[4] = get(xdpgenXlbCounterXLB_RECEIVED_BYTES)
	return c, errors.Join(errs[:]...)
}

// XDPError is a count of XDP frames lost at one device for one reason.
type XDPError struct {
	Event  string `json:"event"`  // "devmap_xmit_drop" or "redirect_err"
	Device string `json:"device"` // devmap: the target; redirect_err: the ingress device
	Errno  int    `json:"errno"`
	Frames uint64 `json:"frames"`
}

// Where names the event, the device and the error, without the count.
func (e XDPError) Where() string {
	s := e.Event + " " + e.Device
	if e.Errno != 0 {
		s += fmt.Sprintf(" (%s)", unix.ErrnoName(unix.Errno(-e.Errno)))
	}
	return s
}

func (e XDPError) String() string { return fmt.Sprintf("%s: %d", e.Where(), e.Frames) }

// XDPErrors reads what the tracepoint programs counted, largest first.
func (o *Objects) XDPErrors() ([]XDPError, error) {
	var out []XDPError
	var k xdpgenXdpErrKey
	var v uint64
	it := o.objs.XlbXdpErrs.Iterate()
	for it.Next(&k, &v) {
		var name strings.Builder
		for _, c := range k.Dev {
			if c == 0 {
				break
			}
			name.WriteByte(byte(c))
		}
		ev := "devmap_xmit_drop"
		if xdpgenXlbEvent(k.Event) == xdpgenXlbEventXLB_EV_REDIRECT_ERR {
			ev = "redirect_err"
		}
		out = append(out, XDPError{Event: ev, Device: name.String(), Errno: int(k.Err), Frames: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Frames > out[j].Frames })
	return out, it.Err()
}
