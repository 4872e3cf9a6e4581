package model

import "net/netip"

// thisNetwork is 0.0.0.0/8, "this host on this network" (RFC 1122): a
// source address only, never a destination.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// VIPAddrProblem says why a cannot be a service VIP, "" when it can. A
// VIP is matched as a destination before any route: 0.0.0.0 would take
// the node's own connections to "any local address" (0.0.0.0:80 reaches
// every local listener of port 80) to the backends, a loopback VIP the
// node's own loopback traffic, and a broadcast, multicast or link-local
// VIP has no single owner to balance for.
func VIPAddrProblem(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return "the unspecified address: it stands for every local address, so the node's own connections to the port would go to the backends"
	case a.Is4() && thisNetwork.Contains(a):
		return "in 0.0.0.0/8 (\"this network\"): never a destination"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	case a.IsMulticast():
		return "a multicast address: a service VIP is one unicast address"
	case a.IsLoopback():
		return "a loopback address: the node's own, not a service's"
	case a.IsLinkLocalUnicast():
		return "a link-local address: it means nothing beyond one link"
	}
	return ""
}

// BroadcastAddr is the last address of the IPv4 prefix p, its broadcast
// address.
func BroadcastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
