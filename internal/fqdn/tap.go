package fqdn

import (
	"bytes"
	"fmt"
	"net"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// dnsFilter passes UDP packets from or to port 53, IPv4 (not a later
// fragment) or IPv6 (UDP right after the fixed header), to a SOCK_DGRAM
// packet socket (the filter sees the packet from its network header).
var dnsFilter = []bpf.Instruction{
	/* 0 */ bpf.LoadExtension{Num: bpf.ExtProto},
	/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IP, SkipFalse: 9}, // -> 11
	/* 2 */ bpf.LoadAbsolute{Off: 9, Size: 1},
	/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: 14}, // -> 18
	/* 4 */ bpf.LoadAbsolute{Off: 6, Size: 2},
	/* 5 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 12}, // -> 18
	/* 6 */ bpf.LoadMemShift{Off: 0},
	/* 7 */ bpf.LoadIndirect{Off: 0, Size: 2},
	/* 8 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 10}, // -> 19
	/* 9 */ bpf.LoadIndirect{Off: 2, Size: 2},
	/* 10 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 8, SkipFalse: 7}, // -> 19, 18
	/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IPV6, SkipFalse: 6}, // -> 18
	/* 12 */ bpf.LoadAbsolute{Off: 6, Size: 1},
	/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: 4}, // -> 18
	/* 14 */ bpf.LoadAbsolute{Off: 40, Size: 2},
	/* 15 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 3}, // -> 19
	/* 16 */ bpf.LoadAbsolute{Off: 42, Size: 2},
	/* 17 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 53, SkipTrue: 1}, // -> 19
	/* 18 */ bpf.RetConstant{Val: 0},
	/* 19 */ bpf.RetConstant{Val: 0xffff},
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openTap opens a packet socket in the namespace at netnsPath on the
// endpoint's device (the one with MAC mac, else the one called ifname;
// not loopback: a DNS server of the endpoint's own, on its own address,
// answers there), with dnsFilter: a copy of every DNS packet the endpoint
// sends or receives. The socket takes no packet before it is bound, after
// the filter is on. It blocks in receive for at most tapTimeout.
func openTap(netnsPath, ifname, mac string) (int, error) {
	raw, err := bpf.Assemble(dnsFilter)
	if err != nil {
		return -1, fmt.Errorf("assemble dns filter: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fd := -1
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
		return -1, fmt.Errorf("tap %s in %s: %w", ifname, netnsPath, err)
	}
	return fd, nil
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
