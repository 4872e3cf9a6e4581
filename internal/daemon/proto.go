package daemon

import (
	"golang.org/x/sys/unix"
)

func protoNumber(p string) uint8 {
	if p == "udp" {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}
