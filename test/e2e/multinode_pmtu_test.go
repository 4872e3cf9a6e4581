package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// linkMTU is the MTU of device dev in namespace netns.
func linkMTU(t *testing.T, netns, dev string) int {
	t.Helper()
	out := runIn(t, netns, "ip", "-o", "link", "show", dev)
	m := regexp.MustCompile(` mtu (\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no mtu in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// icmpSeen is what the kernel's error queue said of an ICMP error a
// socket got (struct sock_extended_err and its offender).
type icmpSeen struct {
	errno          syscall.Errno
	origin         uint8 // SO_EE_ORIGIN_ICMP, _ICMP6
	typ, code      uint8
	info           uint32 // frag needed / packet too big: the MTU
	from           netip.Addr
	sendsRefused   bool // a later send of the same size: EMSGSIZE
	errQueueWaited time.Duration
}

// pmtuError sends, from netns, UDP datagrams with size bytes of payload
// and DF (IP_PMTUDISC_DO, IPV6_PMTUDISC_DO) to dst until the socket's error
// queue (IP_RECVERR) holds an ICMP error, and returns it: the kernel queues
// it only if the error's quote names this socket's flow (source address
// and port, destination VIP and port).
func pmtuError(netns string, dst netip.AddrPort, size int) (icmpSeen, error) {
	var seen icmpSeen
	var conn *net.UDPConn
	v4 := dst.Addr().Is4()
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		return seen, err
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		return seen, err
	}
	var serr error
	raw.Control(func(fd uintptr) {
		if v4 {
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO),
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1))
		} else {
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO),
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1))
		}
	})
	if serr != nil {
		return seen, serr
	}
	payload := make([]byte, size)
	start := time.Now()
	for deadline := start.Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := conn.Write(payload); err != nil && !errors.Is(err, syscall.EMSGSIZE) {
			return seen, fmt.Errorf("send %d bytes to %s: %w", size, dst, err)
		}
		time.Sleep(200 * time.Millisecond)
		var got bool
		raw.Control(func(fd uintptr) {
			buf, oob := make([]byte, 2048), make([]byte, 512)
			_, oobn, _, _, err := unix.Recvmsg(int(fd), buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if err != nil {
				return
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return
			}
			for _, m := range msgs {
				if !(m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR) &&
					!(m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR) {
					continue
				}
				d := m.Data
				if len(d) < 16 {
					continue
				}
				seen.errno = syscall.Errno(binary.NativeEndian.Uint32(d[0:4]))
				seen.origin, seen.typ, seen.code = d[4], d[5], d[6]
				seen.info = binary.NativeEndian.Uint32(d[8:12])
				off := d[16:] // the offender: a sockaddr_in or sockaddr_in6
				switch {
				case len(off) >= 8 && binary.NativeEndian.Uint16(off) == unix.AF_INET:
					seen.from = netip.AddrFrom4([4]byte(off[4:8]))
				case len(off) >= 24 && binary.NativeEndian.Uint16(off) == unix.AF_INET6:
					seen.from = netip.AddrFrom16([16]byte(off[8:24]))
				}
				got = true
			}
		})
		if got {
			seen.errQueueWaited = time.Since(start)
			_, err := conn.Write(payload)
			seen.sendsRefused = errors.Is(err, syscall.EMSGSIZE)
			return seen, nil
		}
	}
	return seen, fmt.Errorf("no ICMP error in the socket's error queue after 5 s of %d-byte datagrams to %s", size, dst)
}

// udpPortRefused sends a datagram from netns to dst on a connected socket and
// reports whether a reply or an error came back: ECONNREFUSED is the ICMP
// port unreachable the kernel matched to the socket by its quote.
func udpPortRefused(netns string, dst netip.AddrPort) error {
	var conn *net.UDPConn
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	var last error
	for i := 0; i < 4; i++ {
		if _, err := conn.Write([]byte("anyone there?")); err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				return nil
			}
			last = err
			continue
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err := conn.Read(make([]byte, 64))
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		last = err
	}
	return fmt.Errorf("no port unreachable from %s: %v", dst, last)
}

// testExternalPMTU: an outside client sends a UDP datagram with DF to a
// NodePort whose backend is on the other node, larger than the overlay's
// MTU but not than its own link's: its socket gets the ICMP error
// (fragmentation needed, packet too big) naming the overlay's MTU, from
// the NodePort's address, and the kernel then refuses datagrams that size
// (EMSGSIZE); drop_too_big is counted on n1's uplink. A TCP transfer
// through the same node to the other node's pod then checks its SHA-256
// both ways, over the client's larger link.
func testExternalPMTU(t *testing.T, out string, n1, n2 *clusterNode, fam string, node1 netip.Addr, pod2 string, size int64) {
	ulMTU, ovMTU := linkMTU(t, n1.netns, "ul0"), linkMTU(t, n1.netns, "xlvx0")
	// The client's link as big as the underlay's (its bridge port too).
	run(t, "ip", "-n", n1.ul, "link", "set", "pout", "mtu", fmt.Sprint(ulMTU))
	runIn(t, out, "ip", "link", "set", "eth0", "mtu", fmt.Sprint(ulMTU))
	hdr, origin, typ, code := 28, uint8(unix.SO_EE_ORIGIN_ICMP), uint8(3), uint8(4)
	if fam == "ipv6" {
		hdr, origin, typ, code = 48, unix.SO_EE_ORIGIN_ICMP6, 2, 0
	}
	vip := netip.AddrPortFrom(node1, 30085)
	n1.mustXlane(nil, "service", "create", "pmtu-"+fam, "--vip", vip.String()+"/udp", "--backend", pod2+":9097")
	before := uplinkCounter(t, n1, "ul0", "drop_too_big")
	seen, err := pmtuError(out, vip, ulMTU-hdr)
	if err != nil {
		t.Fatalf("%v (overlay MTU %d, client link %d)", err, ovMTU, ulMTU)
	}
	t.Logf("%s: ICMP type %d code %d mtu %d from %s after %v; a send that size again: EMSGSIZE %v",
		vip, seen.typ, seen.code, seen.info, seen.from, seen.errQueueWaited, seen.sendsRefused)
	if seen.errno != syscall.EMSGSIZE || seen.origin != origin || seen.typ != typ || seen.code != code ||
		seen.info != uint32(ovMTU) || seen.from != node1 {
		t.Errorf("error queue: %+v; want EMSGSIZE, ICMP type %d code %d, mtu %d (the overlay's), from %s", seen, typ, code, ovMTU, node1)
	}
	if !seen.sendsRefused {
		t.Errorf("a %d-byte datagram to %s after the error was not refused (EMSGSIZE): the kernel did not take the MTU", ulMTU-hdr, vip)
	}
	if n := uplinkCounter(t, n1, "ul0", "drop_too_big"); n <= before {
		t.Errorf("drop_too_big on n1's ul0: %d, want more than %d", n, before)
	}
	n1.mustXlane(nil, "service", "create", "pmtu-tcp-"+fam, "--vip", netip.AddrPortFrom(node1, 30086).String(), "--backend", pod2+":9098")
	exchangeVia(t, out, n2.pod, netip.AddrPortFrom(pick(fam, n2.ip4(), n2.ip6()), 9098), netip.AddrPortFrom(node1, 30086), size)
}

// testExternalRefused: a UDP NodePort whose backend, on the other node,
// has nothing listening: the backend's port unreachable, sent to n1's
// cluster address (over the overlay, or natively routed to n1's uplink),
// reaches the outside client translated, so its connected socket reports
// ECONNREFUSED.
func testExternalRefused(t *testing.T, out string, n1 *clusterNode, fam string, node1 netip.Addr, pod2 string) {
	refused := netip.AddrPortFrom(node1, 30087)
	n1.mustXlane(nil, "service", "create", "refused-"+fam, "--vip", refused.String()+"/udp", "--backend", pod2+":9099")
	if err := udpPortRefused(out, refused); err != nil {
		t.Errorf("UDP to %s (backend %s:9099, nothing listening): %v", refused, pod2, err)
	}
}
