// Command vm is the host-side VM endpoint benchmark (make bench BENCH=vm):
// what a VM's port costs the node, without a guest (the guests here run in
// software emulation: their own speed is not a figure). A generator writes
// frames into each kind of VM host device exactly as QEMU would, and a
// counter on the receiving container's eth0 (tcx ingress, bench/gen's
// xlb_count) counts what arrives:
//
//	kubevirt  tap0 write (vnet hdr) -> bridge k6t-eth0 -> eth0 ==veth== node (routing) ==veth== receiver
//	          (KubeVirt's default: a tap and a Linux bridge in the virt-launcher pod's namespace)
//	tap       tap write (vnet hdr) -> xlane VM endpoint's tap [tcx] -> bpf_redirect_peer -> receiver
//	af-xdp    XSK TX (copy mode, as QEMU's af-xdp) on the port xlc.. ==veth== xlh.. [tcx] -> receiver
//
// for 64-byte frames (packets/s), 1514-byte frames and 64 KiB TCP GSO
// packets (bytes/s: a tap write with a virtio-net header asking for
// GSO_TCPV4, as a guest's virtio-net hands QEMU a TSO packet; the AF_XDP
// port has no virtio-net header, hence no GSO, and is not run there), with
// the machine's busy CPU time per received packet and per KiB (generator
// included: QEMU's share). Variants are interleaved per repetition; it prints medians and
// ratios against kubevirt. The af-xdp variant needs xlaned to offer the
// backend, i.e. a QEMU with af-xdp (scripts/qemu-afxdp.sh; -qemu); without
// one it is reported as not run.
//
//	go run ./bench/vm -out bench/results        # 3 reps, 5 s each
//	go run ./bench/vm -quick                     # 1 rep, 1 s
//
// Everything it creates (namespaces, devices, pins, xlaned) is removed on
// exit, ^C included.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/internal/api"
)

const defaultQEMU = "/var/cache/xlane/qemu-afxdp/bin/qemu-system-x86_64"

type options struct {
	harness.RunFlags
	qemu string
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench vm: ")
	var o options
	o.Register(flag.CommandLine, harness.RunFlagsUsage{
		Quick:           "development run: 1 repetition of 1 s (unless -reps/-duration are given)",
		Reps:            "repetitions; each runs every variant once per frame size, interleaved",
		Duration:        "length of each generator run",
		DefaultDuration: 5 * time.Second,
		Out:             "directory for vm-<date>.json and vm-latest.md",
		DefaultOut:      "bench/results",
		KeepTmp:         "keep the temp dir (xlaned's log)",
	})
	flag.StringVar(&o.qemu, "qemu", defaultQEMU, "a QEMU with af-xdp for xlaned to offer AF_XDP ports (scripts/qemu-afxdp.sh); missing: af-xdp is not run")
	if err := o.Parse(flag.CommandLine, os.Args[1:], map[string]string{"reps": "1", "duration": "1s"}); err != nil {
		log.Print(err)
		os.Exit(2)
	}
	os.Exit(harness.Main("vm", o.KeepTmp, func(ctx context.Context, tmp string, undo *harness.UndoStack) error {
		return run(ctx, o, tmp, undo)
	}))
}

// sender is a generator: QEMU's way of handing frames to its host device.
type sender interface {
	send(n int) (int, error)
	close()
}

// variant is one VM host device with its receiver.
type variant struct {
	name   string
	ns     string // where the generator opens its device
	device string
	flow   gen.Flow
	rxNS   string // the receiver's namespace; the counter is on its eth0
	open   func(frame []byte, gso bool) (sender, error)
	noGSO  string // why the variant cannot take GSO packets ("": it can)
	ctr    *gen.Objects
}

type sample struct {
	Variant  string  `json:"variant"`
	Shape    string  `json:"shape"`
	Size     int     `json:"frame_bytes"`
	GSO      bool    `json:"gso,omitempty"`
	Rep      int     `json:"rep"`
	Offered  uint64  `json:"offered"`
	Received uint64  `json:"received"`
	Bytes    uint64  `json:"received_bytes"`
	PPS      float64 `json:"pps"`
	Gbps     float64 `json:"gbit_s"`
	CPUNs    float64 `json:"cpu_ns_per_packet"`
	CPUNsKiB float64 `json:"cpu_ns_per_kib"`
}

type report struct {
	harness.RunHeader
	NotRun  map[string]string `json:"not_run,omitempty"`
	Samples []sample          `json:"samples"`
}

// shape is what one generator write (or XSK descriptor) carries.
type shape struct {
	name string
	size int  // frame bytes, Ethernet header included
	gso  bool // a TCP packet the host segments (tapWriter's GSO header)
}

// gsoFrameLen is a TSO-sized TCP packet: 45 segments of gsoMSS bytes
// behind Ethernet, IPv4 and TCP headers (IPv4 total length 65200).
const gsoFrameLen = 14 + 20 + 20 + 45*gsoMSS

var shapes = []shape{{"60 B", gen.FrameLen, false}, {"1514 B", 1514, false}, {"64 KiB GSO", gsoFrameLen, true}}

func run(ctx context.Context, o options, tmp string, undo *harness.UndoStack) error {
	rep := report{RunHeader: harness.RunHeader{Started: time.Now(), Kernel: harness.KernelRelease(), CPU: harness.CPUModel(),
		NProc: runtime.NumCPU(), LoadStart: harness.LoadAvg(),
		Options: map[string]string{"reps": fmt.Sprint(o.Reps), "duration": o.Duration.String(), "qemu": o.qemu}},
		NotRun: map[string]string{}}
	vs, err := setup(ctx, o, tmp, undo, rep.NotRun)
	if err != nil {
		return err
	}
	for r := 0; r < o.Reps; r++ {
		for _, sh := range shapes {
			for i := range vs {
				v := &vs[(i+r)%len(vs)] // rotate the order per repetition
				if sh.gso && v.noGSO != "" {
					rep.NotRun[v.name+" "+sh.name] = v.noGSO
					continue
				}
				s, err := measureOne(ctx, v, sh, o.Duration)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", v.name, sh.name, err)
				}
				s.Rep = r
				log.Printf("rep %d %-8s %-10s: %9.0f pps %6.2f Gbit/s %7.0f ns CPU/packet %6.0f ns CPU/KiB (offered %d)",
					r, v.name, sh.name, s.PPS, s.Gbps, s.CPUNs, s.CPUNsKiB, s.Offered)
				rep.Samples = append(rep.Samples, s)
			}
		}
	}
	rep.Finished, rep.LoadEnd = time.Now(), harness.LoadAvg()
	js, _ := json.MarshalIndent(rep, "", "  ")
	return harness.PrintResults(o.Out, "vm", rep.Started, rep.markdown(vs), js)
}

// measureOne runs v's generator for d with packets of shape sh.
func measureOne(ctx context.Context, v *variant, sh shape, d time.Duration) (sample, error) {
	build := buildFrame
	if sh.gso {
		build = buildTCPFrame
	}
	frame, err := build(v.flow, sh.size)
	if err != nil {
		return sample{}, err
	}
	before, err := v.ctr.Counters()
	if err != nil {
		return sample{}, err
	}
	type result struct {
		sent uint64
		err  error
	}
	done := make(chan result, 1)
	var cpu0 measure.CPUTimes
	start := make(chan struct{})
	go func() {
		// The generator's thread stays in v.ns and dies with the
		// goroutine (locked, never unlocked).
		runtime.LockOSThread()
		var res result
		defer func() { done <- res }()
		if res.err = enter(v.ns); res.err != nil {
			close(start)
			return
		}
		s, err := v.open(frame, sh.gso)
		if err != nil {
			res.err = err
			close(start)
			return
		}
		defer s.close()
		close(start)
		end := time.Now().Add(d)
		for time.Now().Before(end) && ctx.Err() == nil {
			n, err := s.send(64)
			res.sent += uint64(n)
			if err != nil {
				res.err = err
				return
			}
		}
	}()
	<-start
	cpu0, _ = procStat()
	t0 := time.Now()
	res := <-done
	el := time.Since(t0)
	cpu1, _ := procStat()
	if res.err != nil {
		return sample{}, res.err
	}
	time.Sleep(50 * time.Millisecond) // what is still in flight
	after, err := v.ctr.Counters()
	if err != nil {
		return sample{}, err
	}
	got, bytes := after.Received-before.Received, after.ReceivedBytes-before.ReceivedBytes
	s := sample{Variant: v.name, Shape: sh.name, Size: sh.size, GSO: sh.gso, Offered: res.sent, Received: got, Bytes: bytes,
		PPS: float64(got) / el.Seconds(), Gbps: float64(bytes) * 8 / el.Seconds() / 1e9}
	if got > 0 {
		// /proc/stat ticks are USER_HZ (100 per second).
		busy := float64(cpu1.Busy-cpu0.Busy) * 1e7
		s.CPUNs, s.CPUNsKiB = busy/float64(got), busy/(float64(bytes)/1024)
	}
	if got == 0 {
		return s, fmt.Errorf("nothing arrived (offered %d)", res.sent)
	}
	return s, nil
}

func procStat() (measure.CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return measure.CPUTimes{}, err
	}
	return measure.ParseProcStat(string(b))
}

// enter moves the calling (locked) thread into the named namespace.
func enter(ns string) error {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", ns, err)
	}
	defer h.Close()
	return netns.Set(h)
}

// inNS runs fn on a thread of its own in ns (the thread dies after).
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := enter(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// buildFrame is f's frame grown to size bytes (a UDP payload of zeros),
// UDP checksum 0 (none): no offload is asked of the host device.
func buildFrame(f gen.Flow, size int) ([]byte, error) {
	base, err := f.Frame()
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	copy(b, base)
	ip := b[14:34]
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(s))
	binary.BigEndian.PutUint16(b[38:], uint16(size-34)) // UDP length
	b[40], b[41] = 0, 0
	return b, nil
}

// buildTCPFrame is f's flow as one TCP packet of size bytes (ACK|PSH, a
// payload of zeros) as a guest's virtio-net hands it to QEMU for TSO: the
// IPv4 header complete, the TCP checksum field holding the pseudo-header
// sum only (CHECKSUM_PARTIAL, completed per segment by whoever segments).
func buildTCPFrame(f gen.Flow, size int) ([]byte, error) {
	base, err := f.Frame()
	if err != nil {
		return nil, err
	}
	if size < 54 || size-14 > 0xffff {
		return nil, fmt.Errorf("tcp frame of %d bytes: want 54 to %d", size, 0xffff+14)
	}
	b := make([]byte, size)
	copy(b, base[:34])
	ip := b[14:34]
	ip[9] = unix.IPPROTO_TCP
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum16(ip)))
	tcp := b[34:54]
	binary.BigEndian.PutUint16(tcp[0:], f.SrcPort)
	binary.BigEndian.PutUint16(tcp[2:], f.DstPort)
	binary.BigEndian.PutUint32(tcp[4:], 1)    // seq
	binary.BigEndian.PutUint32(tcp[8:], 1)    // ack
	tcp[12] = 5 << 4                          // data offset: 20 bytes
	tcp[13] = 0x18                            // ACK|PSH
	binary.BigEndian.PutUint16(tcp[14:], 512) // window
	ps := sum16(ip[12:20]) + unix.IPPROTO_TCP + uint32(size-34)
	binary.BigEndian.PutUint16(tcp[16:], fold(ps))
	return b, nil
}

func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// xl runs the xlane CLI with -o json into out.
func xl(ctx context.Context, bins, dir string, out any, args ...string) error {
	s, err := harness.Xlane(ctx, bins, dir, append([]string{"-o", "json"}, args...)...)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal([]byte(s), out)
}

func setup(ctx context.Context, o options, tmp string, undo *harness.UndoStack, notRun map[string]string) ([]variant, error) {
	bins, id, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return nil, err
	}
	node, launch, rxTap, rxXSK, rxKV := id+"-node", id+"-launch", id+"-rxtap", id+"-rxxsk", id+"-rxkv"
	if err := harness.AddNamespaces(ctx, undo, node, launch, rxTap, rxXSK, rxKV); err != nil {
		return nil, err
	}
	var args []string
	if _, err := os.Stat(o.qemu); err == nil {
		args = append(args, "--qemu", o.qemu)
	}
	if _, err := harness.StartXlaned(ctx, undo, harness.Xlaned{Name: "xlaned", Netns: node, Bins: bins, Dir: tmp,
		PinDir: "/sys/fs/bpf/" + id + "-pins", Args: args, Timeout: 2 * time.Minute}); err != nil {
		return nil, err
	}
	if err := xl(ctx, bins, tmp, nil, "network", "create", "vmb", "--subnet", "10.77.0.0/24", "--mode", "tc", "--masquerade=false"); err != nil {
		return nil, err
	}
	undo.Push("remove xlane network", func(ctx context.Context) error {
		for _, ep := range []string{"rxtap", "rxxsk", "tap1", "xsk1"} {
			xl(ctx, bins, tmp, nil, "endpoint", "rm", ep)
		}
		return xl(ctx, bins, tmp, nil, "network", "rm", "vmb")
	})
	var vs []variant
	addVariant := func(name, rxNS string, vmArgs []string, mac string) (*api.EndpointInfo, *api.EndpointInfo, error) {
		var rx, ep api.EndpointInfo
		if err := xl(ctx, bins, tmp, &rx, "endpoint", "add", "vmb", "--netns", filepath.Join(harness.NetnsDir, rxNS), "--id", "rx"+name); err != nil {
			return nil, nil, err
		}
		if err := xl(ctx, bins, tmp, &ep, append([]string{"endpoint", "add", "vmb", "--vm", "--id", name + "1", "--mac", mac}, vmArgs...)...); err != nil {
			return &rx, nil, err
		}
		return &rx, &ep, nil
	}
	flow := func(src, dst netip.Addr, srcMAC, dstMAC string) gen.Flow {
		s, _ := net.ParseMAC(srcMAC)
		d, _ := net.ParseMAC(dstMAC)
		return gen.Flow{SrcMAC: s, DstMAC: d, Src: src, Dst: dst, SrcPort: 40000, DstPort: 9, TTL: 64}
	}

	// KubeVirt's default: the launcher pod's namespace holds the tap and
	// the bridge k6t-eth0 with the pod's eth0; the node routes to a
	// receiver on a plain veth (a ptp-style CNI).
	kvVM, kvRX := netip.MustParseAddr("10.78.0.2"), netip.MustParseAddr("10.78.1.2")
	in := func(ns string, a ...string) []string { return harness.NSExec(ns, a...) }
	if err := harness.RunAll(ctx,
		in(node, "sysctl", "-qw", "net.ipv4.ip_forward=1"),
		in(launch, "ip", "tuntap", "add", "dev", "tap0", "mode", "tap", "vnet_hdr"),
		in(launch, "ip", "link", "add", "k6t-eth0", "type", "bridge"),
		in(node, "ip", "link", "add", "kvpod", "type", "veth", "peer", "name", "eth0", "netns", filepath.Join(harness.NetnsDir, launch)),
		in(launch, "ip", "link", "set", "tap0", "master", "k6t-eth0", "up"),
		in(launch, "ip", "link", "set", "eth0", "master", "k6t-eth0", "up"),
		in(launch, "ip", "link", "set", "k6t-eth0", "up"),
		in(node, "ip", "link", "set", "kvpod", "up"),
		in(node, "ip", "route", "add", kvVM.String()+"/32", "dev", "kvpod"),
		in(node, "ip", "link", "add", "kvrx", "type", "veth", "peer", "name", "eth0", "netns", filepath.Join(harness.NetnsDir, rxKV)),
		in(rxKV, "ip", "addr", "add", kvRX.String()+"/24", "dev", "eth0"),
		in(rxKV, "ip", "link", "set", "eth0", "up"),
		in(node, "ip", "link", "set", "kvrx", "up"),
		in(node, "ip", "route", "add", kvRX.String()+"/32", "dev", "kvrx"),
	); err != nil {
		return nil, err
	}
	podMAC, err := harness.LinkMAC(ctx, node, "kvpod")
	if err != nil {
		return nil, err
	}
	rxMAC, err := harness.LinkMAC(ctx, rxKV, "eth0")
	if err != nil {
		return nil, err
	}
	if _, err := harness.Run(ctx, in(node, "ip", "neigh", "replace", kvRX.String(), "lladdr", rxMAC.String(), "dev", "kvrx", "nud", "permanent")...); err != nil {
		return nil, err
	}
	vs = append(vs, variant{name: "kubevirt", ns: launch, device: "tap0", rxNS: rxKV,
		flow: flow(kvVM, kvRX, "52:54:00:78:00:01", podMAC.String()),
		open: func(f []byte, gso bool) (sender, error) { return openTap("tap0", f, gso) }})

	rx, ep, err := addVariant("tap", rxTap, nil, "52:54:00:77:00:01")
	if err != nil {
		return nil, err
	}
	tapName := ep.HostIf
	vs = append(vs, variant{name: "tap", ns: node, device: tapName, rxNS: rxTap,
		flow: flow(ep.IPs[0], rx.IPs[0], ep.MAC, ep.HostMAC),
		open: func(f []byte, gso bool) (sender, error) { return openTap(tapName, f, gso) }})

	rx, ep, err = addVariant("xsk", rxXSK, []string{"--backend", "af-xdp"}, "52:54:00:77:00:02")
	switch {
	case err != nil && ep == nil && rx != nil && strings.Contains(err.Error(), "af-xdp"):
		notRun["af-xdp"] = err.Error()
		log.Printf("af-xdp: not run: %v", err)
	case err != nil:
		return nil, err
	default:
		port := ep.PeerIf
		vs = append(vs, variant{name: "af-xdp", ns: node, device: port, rxNS: rxXSK,
			flow:  flow(ep.IPs[0], rx.IPs[0], ep.MAC, ep.HostMAC),
			noGSO: "AF_XDP has no GSO (no virtio-net header: QEMU's af-xdp backend sends MTU-sized frames)",
			open: func(f []byte, _ bool) (sender, error) {
				l, err := netlink.LinkByName(port)
				if err != nil {
					return nil, err
				}
				return newXSKTX(l.Attrs().Index, f)
			}})
	}

	for i := range vs {
		v := &vs[i]
		if v.ctr, err = gen.Load(v.flow, gen.Frames); err != nil {
			return nil, err
		}
		ctr := v.ctr
		undo.Push("close counter "+v.name, func(context.Context) error { return ctr.Close() })
		err := inNS(v.rxNS, func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			lk, err := ctr.AttachCounter(l.Attrs().Index)
			if err != nil {
				return err
			}
			undo.Push("detach counter", func(context.Context) error { return lk.Close() })
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s receiver: %w", v.name, err)
		}
	}
	return vs, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// markdown is the report: medians per variant and shape, ratios to kubevirt.
func (r report) markdown(vs []variant) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# VM host devices: what the node pays per VM packet (bench/vm)\n\n")
	fmt.Fprintf(&b, "%s, kernel %s, %d CPUs, %s reps of %s, load %s -> %s. Medians; ratios against kubevirt in the same run.\n\n",
		r.Started.UTC().Format(time.RFC3339), r.Kernel, r.NProc, r.Options["reps"], r.Options["duration"], r.LoadStart, r.LoadEnd)
	fmt.Fprintf(&b, "| variant | packet | packets/s | Gbit/s | CPU ns/packet | CPU ns/KiB | rate vs kubevirt | CPU vs kubevirt |\n|---|---|---|---|---|---|---|---|\n")
	type meds struct{ pps, gbps, cpu, cpuKiB float64 }
	med := map[string]map[string]meds{}
	for _, v := range vs {
		med[v.name] = map[string]meds{}
		for _, sh := range shapes {
			var p, g, c, k []float64
			for _, s := range r.Samples {
				if s.Variant == v.name && s.Shape == sh.name {
					p, g, c, k = append(p, s.PPS), append(g, s.Gbps), append(c, s.CPUNs), append(k, s.CPUNsKiB)
				}
			}
			if len(p) > 0 {
				med[v.name][sh.name] = meds{median(p), median(g), median(c), median(k)}
			}
		}
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, sh := range shapes {
		base := med["kubevirt"][sh.name]
		for _, v := range vs {
			m, ok := med[v.name][sh.name]
			if !ok {
				fmt.Fprintf(&b, "| %s | %s | - | - | - | - | - | - |\n", v.name, sh.name)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %.0f | %.0f | %s | %s |\n", v.name, sh.name, m.pps, m.gbps, m.cpu, m.cpuKiB,
				ratio(m.pps, base.pps), ratio(m.cpu, base.cpu))
		}
	}
	var notRun []string
	for k := range r.NotRun {
		notRun = append(notRun, k)
	}
	sort.Strings(notRun)
	for _, k := range notRun {
		fmt.Fprintf(&b, "\n%s: not run: %s\n", k, r.NotRun[k])
	}
	b.WriteString("\nCPU is the whole machine's busy time over the run (the generator, QEMU's share, included) per received packet and per KiB received. ")
	b.WriteString("A 64 KiB GSO packet is one tap write of a 65214-byte TCP packet with a virtio-net header asking for GSO_TCPV4 (MSS 1448), counted once with all its bytes on arrival. ")
	b.WriteString("Rate and CPU ratios are per packet, the same per byte (every variant moves the same packets). ")
	b.WriteString("Outside reference: QEMU's af-xdp commit reports ~9 Gbit/s TCP on veth in skb mode and 1.0-1.2 Mpps.\n")
	return b.String()
}
