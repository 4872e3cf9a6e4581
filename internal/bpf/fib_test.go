package bpf

import "testing"

// The FIB stage of xlane_from_endpoint (lib/fib_fwd.h skb_fib_forward):
// routes, neighbours, blackholes and forwarding switched off, in the
// topology of tc_test.go. The XDP twin's (xdp_fib_forward) table is
// xdp_test.go's TestXDPFIB.

func fibCases(tb testing.TB) []verdictCase {
	return []verdictCase{
		{"ipv4/via gateway", devEP0, tcp4(tb, addr("203.0.113.9")), routed(fwdFIB, gwMAC, upMAC)},
		{"ipv6/via gateway", devEP0, tcp6(tb, addr("2001:db8:203::9")), routed(fwdFIB, gwMAC, upMAC)},
		{"ipv4/neighbour unresolved", devEP0, tcp4(tb, addr("198.51.100.77")), routed(fwdNeigh, epSrc.hostMAC, epSrc.mac)},
		{"ipv6/neighbour unresolved", devEP0, tcp6(tb, addr("2001:db8:100::77")), routed(fwdNeigh, epSrc.hostMAC, epSrc.mac)},
		{"ipv4/node address", devEP0, tcp4(tb, addr("198.51.100.1")), passed(passNotFwded)},
		{"ipv6/node address", devEP0, tcp6(tb, addr("2001:db8:100::1")), passed(passNotFwded)},
		{"ipv4/blackhole", devEP0, tcp4(tb, addr("192.0.2.9")), passed(passNoRoute)},
		{"ipv6/blackhole", devEP0, tcp6(tb, addr("2001:db8:bad::9")), passed(passNoRoute)},
		// The kernel answers NOT_FWDED for a missing route as for a
		// local one (abi.h: pass_not_fwded).
		{"ipv4/no route", devEP0, tcp4(tb, addr("100.64.0.1")), passed(passNotFwded)},
		{"ipv6/no route", devEP0, tcp6(tb, addr("fd99::1")), passed(passNotFwded)},
		{"ipv4/forwarding disabled", devEP1, pktSpec{src: epNoFwd.v4, dst: addr("203.0.113.9")}.frame(tb), passed(passNoRoute)},
		{"ipv6/forwarding disabled", devEP1, pktSpec{src: epNoFwd.v6, dst: addr("2001:db8:203::9")}.frame(tb), passed(passNoRoute)},
		{"ipv4/from loopback", devLo, pktSpec{src: epLo.v4, dst: addr("203.0.113.9")}.frame(tb), routed(fwdFIB, gwMAC, upMAC)},
	}
}

func TestFromEndpointFIB(t *testing.T) { runCases(t, fibCases(t)) }
