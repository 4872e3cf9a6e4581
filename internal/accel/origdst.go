package accel

import (
	"encoding/binary"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (SOL_IP) and IP6T_SO_ORIGINAL_DST
// (SOL_IPV6): both 80.
const soOriginalDst = 80

// OriginalDst reads the destination a redirected connection was made to,
// as a proxy behind iptables REDIRECT does: getsockopt(SOL_IP,
// SO_ORIGINAL_DST) for IPv4 (a struct sockaddr_in), getsockopt(SOL_IPV6,
// IP6T_SO_ORIGINAL_DST) for IPv6 (a struct sockaddr_in6). c is the
// proxy's accepted connection.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	v6 := c.LocalAddr().(*net.TCPAddr).IP.To4() == nil
	var ap netip.AddrPort
	var gerr error
	rc.Control(func(fd uintptr) {
		if !v6 {
			// struct sockaddr_in: family, port (network order), address.
			b := make([]byte, 16)
			if gerr = getsockoptBytes(int(fd), unix.SOL_IP, soOriginalDst, b); gerr == nil {
				ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
			}
			return
		}
		// struct sockaddr_in6: family, port, flowinfo, address, scope.
		b := make([]byte, 28)
		if gerr = getsockoptBytes(int(fd), unix.SOL_IPV6, soOriginalDst, b); gerr == nil {
			ap = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:4]))
		}
	})
	return ap, gerr
}

// getsockoptBytes is getsockopt(2) into b (x/sys/unix has no call for a
// raw sockaddr).
func getsockoptBytes(fd, level, name int, b []byte) error {
	l := uint32(len(b))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}
