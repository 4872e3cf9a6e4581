package main

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xskTX is a transmit-only AF_XDP socket in copy mode, as QEMU's af-xdp
// backend binds one per queue: frames are written into its UMEM once and
// sent again and again through the TX ring; sendto kicks the kernel,
// which builds an skb per frame and transmits it on the device
// (xsk_generic_xmit: veth has no zero-copy).
type xskTX struct {
	fd                 int
	umem, txMem, crMem []byte
	txProd, txCons     *uint32
	txDesc             []unix.XDPDesc
	crProd, crCons     *uint32
	crAddrs            []uint64
	free               []uint64 // UMEM frames not in flight
	frameLen           uint32
	txCached, crCached uint32
}

const (
	xskFrames    = 2048
	xskFrameSize = 4096
	xskRing      = 2048
)

func sockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0); e != 0 {
		return e
	}
	return nil
}

// newXSKTX binds a socket to queue 0 of ifindex (in the calling thread's
// namespace) with frame in every UMEM frame.
func newXSKTX(ifindex int, frame []byte) (*xskTX, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open AF_XDP socket: %w", err)
	}
	x := &xskTX{fd: fd, frameLen: uint32(len(frame))}
	fail := func(what string, err error) (*xskTX, error) {
		x.close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	x.umem, err = unix.Mmap(-1, 0, xskFrames*xskFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap umem", err)
	}
	for i := 0; i < xskFrames; i++ {
		copy(x.umem[i*xskFrameSize:], frame)
		x.free = append(x.free, uint64(i*xskFrameSize))
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: xskFrameSize}
	if err := sockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fail("register umem", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, xskRing); err != nil {
			return fail("ring size", err)
		}
	}
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return fail("mmap offsets", e)
	}
	x.txMem, err = unix.Mmap(fd, unix.XDP_PGOFF_TX_RING, int(off.Tx.Desc)+xskRing*int(unsafe.Sizeof(unix.XDPDesc{})),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap tx ring", err)
	}
	x.crMem, err = unix.Mmap(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, int(off.Cr.Desc)+xskRing*8,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap completion ring", err)
	}
	x.txProd = (*uint32)(unsafe.Pointer(&x.txMem[off.Tx.Producer]))
	x.txCons = (*uint32)(unsafe.Pointer(&x.txMem[off.Tx.Consumer]))
	x.txDesc = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&x.txMem[off.Tx.Desc])), xskRing)
	x.crProd = (*uint32)(unsafe.Pointer(&x.crMem[off.Cr.Producer]))
	x.crCons = (*uint32)(unsafe.Pointer(&x.crMem[off.Cr.Consumer]))
	x.crAddrs = unsafe.Slice((*uint64)(unsafe.Pointer(&x.crMem[off.Cr.Desc])), xskRing)
	if err := unix.Bind(fd, &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: 0}); err != nil {
		return fail("bind AF_XDP socket", err)
	}
	return x, nil
}

// send queues up to n frames, kicks the kernel and reaps completions; it
// returns the frames the kernel completed (sent) in this call.
func (x *xskTX) send(n int) (int, error) {
	prod := x.txCached
	for i := 0; i < n && len(x.free) > 0; i++ {
		d := &x.txDesc[prod%xskRing]
		d.Addr, d.Len, d.Options = x.free[len(x.free)-1], x.frameLen, 0
		x.free = x.free[:len(x.free)-1]
		prod++
	}
	x.txCached = prod
	atomic.StoreUint32(x.txProd, prod)
	if _, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0); e != 0 &&
		e != syscall.EAGAIN && e != syscall.EBUSY && e != syscall.ENOBUFS {
		return 0, fmt.Errorf("sendto: %w", e)
	}
	cprod := atomic.LoadUint32(x.crProd)
	done := int(cprod - x.crCached)
	for c := x.crCached; c != cprod; c++ {
		x.free = append(x.free, x.crAddrs[c%xskRing])
	}
	x.crCached = cprod
	atomic.StoreUint32(x.crCons, cprod)
	return done, nil
}

func (x *xskTX) close() {
	for _, m := range [][]byte{x.txMem, x.crMem, x.umem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	unix.Close(x.fd)
}
