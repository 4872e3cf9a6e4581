package e2e

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xsk is an AF_XDP socket in copy mode on one queue of a device, with
// the four rings, as QEMU's af-xdp backend binds one per queue: the tests
// stand in for QEMU on an AF_XDP port without a guest.
type xsk struct {
	fd                   int
	umem                 []byte
	rxMem, txMem         []byte
	fqMem, cqMem         []byte
	rxProd, rxCons       *uint32
	rxDesc               []unix.XDPDesc
	txProd               *uint32
	txDesc               []unix.XDPDesc
	fqProd               *uint32
	fqAddr               []uint64
	cqProd, cqCons       *uint32
	rxSeen, txNext, fqAt uint32
}

const (
	xskTestFrames = 64
	xskTestFrame  = 4096
	xskTestRing   = 64
)

// openXSK binds a socket to queue of ifindex, in the calling thread's
// network namespace (a socket binds in the namespace it was opened in),
// and hands the kernel half the UMEM for receiving; the other half is for
// sending.
func openXSK(ifindex, queue int) (*xsk, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open AF_XDP socket: %w", err)
	}
	x := &xsk{fd: fd}
	fail := func(what string, err error) (*xsk, error) {
		x.close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if x.umem, err = unix.Mmap(-1, 0, xskTestFrames*xskTestFrame, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE); err != nil {
		return fail("mmap umem", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: xskTestFrame}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG, uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		return fail("register umem", e)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, xskTestRing); err != nil {
			return fail("ring size", err)
		}
	}
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return fail("mmap offsets", e)
	}
	ring := func(pgoff int64, o unix.XDPRingOffset, elem int) ([]byte, error) {
		return unix.Mmap(fd, pgoff, int(o.Desc)+xskTestRing*elem, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	}
	desc := int(unsafe.Sizeof(unix.XDPDesc{}))
	if x.rxMem, err = ring(unix.XDP_PGOFF_RX_RING, off.Rx, desc); err != nil {
		return fail("mmap rx ring", err)
	}
	if x.txMem, err = ring(unix.XDP_PGOFF_TX_RING, off.Tx, desc); err != nil {
		return fail("mmap tx ring", err)
	}
	if x.fqMem, err = ring(unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, 8); err != nil {
		return fail("mmap fill ring", err)
	}
	if x.cqMem, err = ring(unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, 8); err != nil {
		return fail("mmap completion ring", err)
	}
	x.rxProd = (*uint32)(unsafe.Pointer(&x.rxMem[off.Rx.Producer]))
	x.rxCons = (*uint32)(unsafe.Pointer(&x.rxMem[off.Rx.Consumer]))
	x.rxDesc = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&x.rxMem[off.Rx.Desc])), xskTestRing)
	x.txProd = (*uint32)(unsafe.Pointer(&x.txMem[off.Tx.Producer]))
	x.txDesc = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&x.txMem[off.Tx.Desc])), xskTestRing)
	x.fqProd = (*uint32)(unsafe.Pointer(&x.fqMem[off.Fr.Producer]))
	x.fqAddr = unsafe.Slice((*uint64)(unsafe.Pointer(&x.fqMem[off.Fr.Desc])), xskTestRing)
	x.cqProd = (*uint32)(unsafe.Pointer(&x.cqMem[off.Cr.Producer]))
	x.cqCons = (*uint32)(unsafe.Pointer(&x.cqMem[off.Cr.Consumer]))
	// Frames 0..31 receive, 32..63 send.
	for i := 0; i < xskTestFrames/2; i++ {
		x.fqAddr[i] = uint64(i * xskTestFrame)
	}
	x.fqAt = xskTestFrames / 2
	atomic.StoreUint32(x.fqProd, x.fqAt)
	if err := unix.Bind(fd, &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: uint32(queue)}); err != nil {
		return fail(fmt.Sprintf("bind AF_XDP socket to queue %d", queue), err)
	}
	return x, nil
}

// send transmits frame from the socket's queue (at most 32 sends a socket).
func (x *xsk) send(frame []byte) error {
	if x.txNext >= xskTestFrames/2 {
		return fmt.Errorf("xsk: out of send frames")
	}
	addr := uint64((xskTestFrames/2 + x.txNext) * xskTestFrame)
	copy(x.umem[addr:], frame)
	x.txDesc[x.txNext%xskTestRing] = unix.XDPDesc{Addr: addr, Len: uint32(len(frame))}
	x.txNext++
	atomic.StoreUint32(x.txProd, x.txNext)
	if _, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0); e != 0 && e != syscall.EAGAIN && e != syscall.EBUSY {
		return fmt.Errorf("sendto: %w", e)
	}
	return nil
}

// recv returns the frames received within d (their buffers go back to
// the fill ring).
func (x *xsk) recv(d time.Duration) [][]byte {
	var got [][]byte
	for end := time.Now().Add(d); time.Now().Before(end); {
		prod := atomic.LoadUint32(x.rxProd)
		for ; x.rxSeen != prod; x.rxSeen++ {
			desc := x.rxDesc[x.rxSeen%xskTestRing]
			got = append(got, append([]byte(nil), x.umem[desc.Addr:desc.Addr+uint64(desc.Len)]...))
			x.fqAddr[x.fqAt%xskTestRing] = desc.Addr &^ (xskTestFrame - 1)
			x.fqAt++
		}
		atomic.StoreUint32(x.rxCons, x.rxSeen)
		atomic.StoreUint32(x.fqProd, x.fqAt)
		unix.Poll([]unix.PollFd{{Fd: int32(x.fd), Events: unix.POLLIN}}, 50)
	}
	return got
}

func (x *xsk) close() {
	for _, m := range [][]byte{x.rxMem, x.txMem, x.fqMem, x.cqMem, x.umem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	unix.Close(x.fd)
}
