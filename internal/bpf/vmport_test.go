package bpf

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// tcpFrame is a TCP segment from 10.0.0.2 to 10.0.0.1 with a complete
// checksum, and the same frame as a CHECKSUM_PARTIAL skb carries it: the
// checksum field holding only the pseudo-header sum.
func tcpFrame(t *testing.T) (complete, partial []byte) {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 63, Protocol: layers.IPProtocolTCP, SrcIP: net.IPv4(10, 0, 0, 2), DstIP: net.IPv4(10, 0, 0, 1)}
	tcp := &layers.TCP{SrcPort: 7000, DstPort: 40000, Seq: 1, Ack: 1, ACK: true, PSH: true, Window: 512}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, tcp, gopacket.Payload(bytes.Repeat([]byte("xlane"), 300))); err != nil {
		t.Fatal(err)
	}
	complete = buf.Bytes()
	partial = append([]byte(nil), complete...)
	l4 := partial[34:]
	s := uint32(0x0a00+0x0002) + uint32(0x0a00+0x0001) + 6 + uint32(len(l4))
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	binary.BigEndian.PutUint16(l4[16:], uint16(s))
	return complete, partial
}

// The AF_XDP port's program (bpf/xdp_vmport.c) puts every frame into the
// socket of its rx queue, and drops (counted) what arrives on a queue
// without one. The socket here is open and unbound, as QEMU's sock-fds=
// takes them: the map takes it, and a test run only reports the verdict
// (the redirect itself happens after the program, on a live device).
//
//	port (rx queue 0) --xlane_xdp_to_vm--> xlane_xsks[0] --> QEMU's socket
func TestVMPort(t *testing.T) {
	objs := ObjectsFor(t, "")
	xsks, err := NewXSKMap()
	if err != nil {
		t.Fatal(err)
	}
	defer xsks.Close()
	prog, err := objs.LoadVMPort(xsks)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	frame := make([]byte, 64)
	run := func(t *testing.T, want uint32, reason string) {
		t.Helper()
		before, err := metricsSnapshot(objs.Metrics())
		if err != nil {
			t.Fatal(err)
		}
		ret, err := RunVerdict(func(f func() error) error { return f() }, prog, objs.Metrics(),
			&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatal(err)
		}
		if ret != want {
			t.Fatalf("verdict %d, want %d", ret, want)
		}
		after, err := metricsSnapshot(objs.Metrics())
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range after {
			if n > before[k] && (Reason(k.Reason).String() != reason || Dir(k.Dir) != DirIngress) {
				t.Fatalf("counted %s/%s, want %s/%s", Reason(k.Reason), Dir(k.Dir), reason, DirIngress)
			}
		}
	}
	t.Run("no socket", func(t *testing.T) { run(t, retXDPDrop, "drop_no_xsk") })
	t.Run("socket on the queue", func(t *testing.T) {
		fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW, 0)
		if err != nil {
			t.Fatalf("open an AF_XDP socket: %v", err)
		}
		defer unix.Close(fd)
		if err := xsks.Put(uint32(0), uint32(fd)); err != nil {
			t.Fatalf("put an unbound socket into the map: %v", err)
		}
		run(t, retXDPRedirect, "fwd_xsk")
		// A CHECKSUM_PARTIAL segment reaches the socket with its
		// checksum finished (QEMU has no way to say "partial").
		complete, partial := tcpFrame(t)
		if bytes.Equal(partial, complete) {
			t.Fatal("the partial frame's checksum is complete already")
		}
		out := make([]byte, len(partial)+256)
		opts := &ebpf.RunOptions{Data: partial, DataOut: out}
		ret, err := RunVerdict(func(f func() error) error { return f() }, prog, objs.Metrics(), opts)
		if err != nil || ret != retXDPRedirect {
			t.Fatalf("partial checksum: verdict %d, %v", ret, err)
		}
		if !bytes.Equal(opts.DataOut, complete) {
			t.Fatalf("partial checksum: frame out\n%x\nwant\n%x", opts.DataOut, complete)
		}
		if err := xsks.Delete(uint32(0)); err != nil {
			t.Fatal(err)
		}
		run(t, retXDPDrop, "drop_no_xsk")
	})
}
