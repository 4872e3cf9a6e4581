package datapath

import "github.com/vishvananda/netlink"

// netlinkDetachXDP removes a program attached the legacy (netlink) way.
func netlinkDetachXDP(ifindex int) error {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return err
	}
	return netlink.LinkSetXdpFd(l, -1)
}
