package main

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tapWriter writes frames into a tap as QEMU does without vhost: one
// write per frame, each behind a virtio-net header (the tap has
// IFF_VNET_HDR). For plain frames the header is zero: no checksum or
// segmentation offload requested (the generator's UDP checksum is 0,
// "none", for IPv4). For a GSO packet (buildTCPFrame) it is what a guest's
// virtio-net puts before a TSO packet: checksum needed from the TCP header
// on, GSO_TCPV4 with MSS gsoMSS; the kernel keeps it one GSO skb and
// segments it (or not) where it leaves the node.
type tapWriter struct {
	fd  int
	buf []byte
}

const vnetHdrLen = 10 // struct virtio_net_hdr

// struct virtio_net_hdr's values (linux/virtio_net.h).
const (
	vnetFlagNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetGSOTCPv4      = 1 // VIRTIO_NET_HDR_GSO_TCPV4
	gsoMSS            = 1448
)

// openTap attaches to the persistent tap name (in the calling thread's
// namespace) with the flags it was created with.
func openTap(name string, frame []byte, gso bool) (*tapWriter, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("attach to tap %s: %w", name, e)
	}
	buf := make([]byte, vnetHdrLen+len(frame))
	copy(buf[vnetHdrLen:], frame)
	if gso {
		// flags, gso_type, hdr_len, gso_size, csum_start, csum_offset;
		// little-endian, the tap's default on x86.
		h := buf[:vnetHdrLen]
		h[0], h[1] = vnetFlagNeedsCsum, vnetGSOTCPv4
		binary.LittleEndian.PutUint16(h[2:], 14+20+20)
		binary.LittleEndian.PutUint16(h[4:], gsoMSS)
		binary.LittleEndian.PutUint16(h[6:], 14+20)
		binary.LittleEndian.PutUint16(h[8:], 16) // TCP's checksum field
	}
	return &tapWriter{fd: fd, buf: buf}, nil
}

// send writes n frames; it returns how many the tap took.
func (w *tapWriter) send(n int) (int, error) {
	for i := 0; i < n; i++ {
		if _, err := unix.Write(w.fd, w.buf); err != nil {
			return i, fmt.Errorf("write tap: %w", err)
		}
	}
	return n, nil
}

func (w *tapWriter) close() { unix.Close(w.fd) }
