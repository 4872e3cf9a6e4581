package observe

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// protoName names an IP protocol number as the API does.
func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}
