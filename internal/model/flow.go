package model

import "net/netip"

// Flow is one conntrack entry (one direction of a flow) as the datapath
// reads it back (internal/datapath/flows.go).
type Flow struct {
	Proto            uint8 // IP protocol number
	Src, Dst         netip.AddrPort
	Reply            bool   // the entry of the reply direction
	State            string // new, established, closing, closed
	NAT              string // "", "snat", "dnat" or "dnat+snat"
	NATTo            netip.AddrPort
	NATSrc           netip.AddrPort // dnat+snat: the new source (hairpin, remapped port)
	Packets, Bytes   uint64
	ExpiresInSeconds int64
}
