package fqdn

import (
	"bytes"
	"fmt"
	"net"
	"time"
	"unsafe"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// dnsFilter passes, to a SOCK_DGRAM packet socket (the filter sees the
// packet from its network header), UDP packets from or to port 53 and
// TCP SYNs without ACK: IPv4 (not a later fragment) or IPv6 (the
// transport header right after the fixed one).
var dnsFilter = []bpf.Instruction{
	/* 0 */ bpf.LoadExtension{Num: bpf.ExtProto},
	/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IP, SkipFalse: 13}, // -> 15
	/* 2 */ bpf.LoadAbsolute{Off: 6, Size: 2},
	/* 3 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 24}, // -> 28
	/* 4 */ bpf.LoadMemShift{Off: 0},
	/* 5 */ bpf.LoadAbsolute{Off: 9, Size: 1},
	/* 6 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_TCP, SkipTrue: 5}, // -> 12
	/* 7 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: 20}, // -> 28
	/* 8 */ bpf.LoadIndirect{Off: 0, Size: 2},
	/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 19}, // -> 29
	/* 10 */ bpf.LoadIndirect{Off: 2, Size: 2},
	/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 17, SkipFalse: 16}, // -> 29, 28
	/* 12 */ bpf.LoadIndirect{Off: 13, Size: 1},
	/* 13 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x12},
	/* 14 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x02, SkipTrue: 14, SkipFalse: 13}, // -> 29, 28
	/* 15 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IPV6, SkipFalse: 12}, // -> 28
	/* 16 */ bpf.LoadAbsolute{Off: 6, Size: 1},
	/* 17 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_TCP, SkipTrue: 6}, // -> 24
	/* 18 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: 9}, // -> 28
	/* 19 */ bpf.LoadAbsolute{Off: 40, Size: 2},
	/* 20 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 8}, // -> 29
	/* 21 */ bpf.LoadAbsolute{Off: 42, Size: 2},
	/* 22 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 6}, // -> 29
	/* 23 */ bpf.RetConstant{Val: 0},
	/* 24 */ bpf.LoadAbsolute{Off: 53, Size: 1},
	/* 25 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x12},
	/* 26 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x02, SkipTrue: 2}, // -> 29
	/* 27 */ bpf.RetConstant{Val: 0},
	/* 28 */ bpf.RetConstant{Val: 0},
	/* 29 */ bpf.RetConstant{Val: 0xffff},
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openTap opens a packet socket in the namespace at netnsPath on the
// endpoint's device (the one with MAC mac, else the one called ifname;
// not loopback: a DNS server of the endpoint's own, on its own address,
// answers there), with dnsFilter: a copy of every DNS packet the endpoint
// sends or receives. The socket takes no packet before it is bound, after
// the filter is on. It blocks in receive for at most tapTimeout.
func openTap(netnsPath, ifname, mac string) (fd, ifindex int, err error) {
	raw, err := bpf.Assemble(dnsFilter)
	if err != nil {
		return -1, 0, fmt.Errorf("assemble dns filter: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fd = -1
	err = ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		ifi, err := endpointDevice(ifname, mac)
		if err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		tv := unix.NsecToTimeval(tapTimeout.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return fmt.Errorf("packet socket receive timeout: %w", err)
		}
		// The kernel's time of each packet: a SYN sent before its
		// destination's entry was written is replayed (replaySYN).
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return fmt.Errorf("packet socket timestamps: %w", err)
		}
		ifindex = ifi.Index
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
			return fmt.Errorf("attach dns filter: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			return fmt.Errorf("bind packet socket to %s: %w", ifname, err)
		}
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, 0, fmt.Errorf("tap %s in %s: %w", ifname, netnsPath, err)
	}
	return fd, ifindex, nil
}

// recvTap reads a packet and the kernel's time of it.
func recvTap(fd int, buf, oob []byte) (int, time.Time, error) {
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
	if err != nil {
		return 0, time.Time{}, err
	}
	at := time.Now()
	if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, cm := range cms {
			if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SCM_TIMESTAMPNS && len(cm.Data) >= 16 {
				ts := (*unix.Timespec)(unsafe.Pointer(&cm.Data[0]))
				at = time.Unix(ts.Unix())
			}
		}
	}
	return n, at, nil
}

// sendTap sends packet (from its IP header on) out of the endpoint's
// device to the gateway's MAC, as the endpoint would.
func sendTap(fd, ifindex int, gw net.HardwareAddr, packet []byte) error {
	proto := uint16(unix.ETH_P_IP)
	if len(packet) > 0 && packet[0]>>4 == 6 {
		proto = unix.ETH_P_IPV6
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex, Halen: uint8(len(gw))}
	copy(sa.Addr[:], gw)
	return unix.Sendto(fd, packet, 0, sa)
}

// tapTimeout bounds a tap's blocking receive: how long a closed tap's
// reader takes to notice.
const tapTimeout = 500 * time.Millisecond

// endpointDevice finds the endpoint's device in the current namespace:
// by MAC (a runtime may have renamed it), else by name.
func endpointDevice(ifname, mac string) (*net.Interface, error) {
	if hw, err := net.ParseMAC(mac); err == nil {
		ifs, err := net.Interfaces()
		if err != nil {
			return nil, err
		}
		for i := range ifs {
			if bytes.Equal(ifs[i].HardwareAddr, hw) {
				return &ifs[i], nil
			}
		}
	}
	if ifname == "" {
		return nil, fmt.Errorf("no device with MAC %q", mac)
	}
	return net.InterfaceByName(ifname)
}
