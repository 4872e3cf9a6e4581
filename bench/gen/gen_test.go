package gen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain refuses to run without root instead of skipping test by test:
// every test here loads the generator, and a skipped test in CI (root)
// would hide a failure.
func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench/gen: these tests load BPF programs: run them as root (make test does)")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

var testFlow = Flow{
	DstMAC:  net.HardwareAddr{0x02, 0, 0, 0, 0, 1},
	SrcMAC:  net.HardwareAddr{0x02, 0, 0, 0, 0, 2},
	Src:     netip.MustParseAddr("10.1.2.3"),
	Dst:     netip.MustParseAddr("10.1.2.4"),
	SrcPort: 40000, DstPort: 9,
	TTL: 64,
}

func TestFrame(t *testing.T) {
	b, err := testFlow.Frame()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != FrameLen {
		t.Fatalf("len %d, want %d", len(b), FrameLen)
	}
	if s := fold(sum16(b[14:34])); s != 0xffff {
		t.Errorf("IPv4 header checksum does not verify: sum %#x", s)
	}
	// The UDP field holds the pseudo-header sum: completing it (adding
	// the UDP bytes with the field zeroed) must give a verifying packet.
	udp := append([]byte(nil), b[34:]...)
	partial := binary.BigEndian.Uint16(udp[6:])
	udp[6], udp[7] = 0, 0
	full := ^fold(uint32(partial) + sum16(udp))
	binary.BigEndian.PutUint16(udp[6:], full)
	src, dst := testFlow.Src.As4(), testFlow.Dst.As4()
	if s := fold(sum16(src[:]) + sum16(dst[:]) + 17 + uint32(len(udp)) + sum16(udp)); s != 0xffff {
		t.Errorf("completed UDP checksum does not verify: %#x", s)
	}
}

// TestPrograms runs the generator and the counter once each with
// BPF_PROG_RUN (not live): the generator must write the whole frame over
// stale data, the counter must take routed frames and leave others.
func TestPrograms(t *testing.T) {
	o, err := Load(testFlow, Frames)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	want, _ := testFlow.Frame()

	stale := bytes.Repeat([]byte{0xee}, FrameLen)
	ret, out, err := o.objs.XlbGen.Test(stale)
	if err != nil {
		t.Fatal(err)
	}
	if ret != 3 { // XDP_TX
		t.Errorf("generator returned %d, want XDP_TX (3)", ret)
	}
	if !bytes.Equal(out[:FrameLen], want) {
		t.Errorf("generator wrote\n%x\nwant\n%x", out[:FrameLen], want)
	}

	routed := append([]byte(nil), want...)
	routed[14+8]--                                                                            // TTL
	binary.BigEndian.PutUint16(routed[14+10:], binary.BigEndian.Uint16(routed[14+10:])+0x100) // incremental fix
	other := append([]byte(nil), want...)
	other[34+3] = 10 // another port
	// A TCP segment of the flow (bench/vm's GSO packets).
	tcp := append([]byte(nil), want...)
	tcp[14+9] = 6
	tcp[14+10], tcp[14+11] = 0, 0
	binary.BigEndian.PutUint16(tcp[14+10:], ^fold(sum16(tcp[14:34])))
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"routed", routed, 2},             // TC_ACT_SHOT
		{"bridged", want, 2},              // TC_ACT_SHOT
		{"tcp", tcp, 2},                   // TC_ACT_SHOT
		{"other port", other, 0xffffffff}, // TC_ACT_UNSPEC
	} {
		ret, _, err := o.objs.XlbCount.Test(c.frame)
		if err != nil {
			t.Fatal(err)
		}
		if ret != c.want {
			t.Errorf("%s: counter returned %d, want %d", c.name, int32(ret), int32(c.want))
		}
	}
	// The bounce program redirects our frames (TC_ACT_REDIRECT) and
	// leaves the rest.
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{{"ours", want, 7}, {"other port", other, 0xffffffff}} {
		ret, _, err := o.objs.XlbBounce.Test(c.frame)
		if err != nil {
			t.Fatal(err)
		}
		if ret != c.want {
			t.Errorf("bounce %s: returned %d, want %d", c.name, int32(ret), int32(c.want))
		}
	}
	got, err := o.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if got != (Counters{Offered: 1, Received: 3, Routed: 1, ReceivedBytes: 3 * FrameLen}) {
		t.Errorf("counters %+v, want offered 1, received 3 (%d bytes), routed 1, bad checksums 0", got, 3*FrameLen)
	}
}

func TestSKBSourcePasses(t *testing.T) {
	o, err := Load(testFlow, SKBs)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ret, _, err := o.objs.XlbGen.Test(make([]byte, FrameLen))
	if err != nil {
		t.Fatal(err)
	}
	if ret != 2 { // XDP_PASS
		t.Errorf("generator returned %d, want XDP_PASS (2)", ret)
	}
}

// TestFlows: with Flows 3 the generator cycles the source port over
// SrcPort..SrcPort+2, one step per frame, and writes the rest of the frame
// as for one flow; the counter takes every one of them.
func TestFlows(t *testing.T) {
	// The flow index is per CPU: stay on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &cpus)
	var one unix.CPUSet
	for c := 0; c < 1024; c++ {
		if cpus.IsSet(c) {
			one.Set(c)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	f := testFlow
	f.Flows = 3
	o, err := Load(f, Frames)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	want, _ := testFlow.Frame()
	for k := range 7 {
		_, out, err := o.objs.XlbGen.Test(bytes.Repeat([]byte{0xee}, FrameLen))
		if err != nil {
			t.Fatal(err)
		}
		port := binary.BigEndian.Uint16(out[34:])
		if wp := testFlow.SrcPort + uint16(k%3); port != wp {
			t.Errorf("frame %d: source port %d, want %d", k, port, wp)
		}
		w := append([]byte(nil), want...)
		binary.BigEndian.PutUint16(w[34:], port)
		if !bytes.Equal(out[:FrameLen], w) {
			t.Errorf("frame %d: wrote\n%x\nwant\n%x", k, out[:FrameLen], w)
		}
		if ret, _, err := o.objs.XlbCount.Test(out[:FrameLen]); err != nil || ret != 2 {
			t.Errorf("frame %d: counter returned %d (%v), want TC_ACT_SHOT (2)", k, int32(ret), err)
		}
	}
	f.SrcPort, f.Flows = 65535, 2
	if _, err := Load(f, Frames); err == nil {
		t.Error("Load: source ports past 65535 accepted")
	}
}
