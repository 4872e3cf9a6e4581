package bpf

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/google/gopacket/layers"
)

// The admit stage of xlane_from_endpoint (lib/endpoint.h ep_admit):
// anti-spoofing, link scope and TTL. Run on the harness of
// harness_test.go, the topology of tc_test.go; the XDP twin's tables are
// xdp_test.go's (TestXDPSpoofing, TestXDPLinkScope, TestXDPTTL).

func spoofCases(tb testing.TB) []verdictCase {
	return []verdictCase{
		{"ipv4/unknown source", devEP0, pktSpec{src: addr("10.9.9.9"), dst: epPeer.v4}.frame(tb), dropped(dropSpoofed)},
		{"ipv4/another endpoint's source", devEP0, pktSpec{src: epOther.v4, dst: epPeer.v4}.frame(tb), dropped(dropSpoofed)},
		{"ipv4/own address on another veth", devEP1, tcp4(tb, epPeer.v4), dropped(dropSpoofed)},
		{"ipv4/spoofed to broadcast", devEP0, pktSpec{src: epOther.v4, dst: addr("255.255.255.255"), proto: layers.IPProtocolUDP}.frame(tb), dropped(dropSpoofed)},
		{"ipv4/spoofed with ttl 1", devEP0, pktSpec{src: addr("10.9.9.9"), dst: epPeer.v4, ttl: 1}.frame(tb), dropped(dropSpoofed)},
		{"ipv4/spoofed to a routed address", devEP0, pktSpec{src: addr("10.9.9.9"), dst: addr("203.0.113.9")}.frame(tb), dropped(dropSpoofed)},
		// Only link-scope sources (IPv6 link-local, unspecified) may pass
		// unchecked; multicast, broadcast and reserved are not among them.
		{"ipv4/reserved 240/4 source", devEP0, pktSpec{src: addr("240.0.0.1"), dst: addr("203.0.113.9")}.frame(tb), dropped(dropSpoofed)},
		{"ipv4/multicast source", devEP0, pktSpec{src: addr("224.0.0.5"), dst: epPeer.v4}.frame(tb), dropped(dropSpoofed)},
		{"ipv6/unknown source", devEP0, pktSpec{src: addr("fd00::99"), dst: epPeer.v6}.frame(tb), dropped(dropSpoofed)},
		{"ipv6/another endpoint's source", devEP0, pktSpec{src: epOther.v6, dst: epPeer.v6}.frame(tb), dropped(dropSpoofed)},
		{"ipv6/own address on another veth", devEP1, tcp6(tb, epPeer.v6), dropped(dropSpoofed)},
		// The MAC belongs to the endpoint as its address does (issue
		// 12 item 5): another endpoint's MAC, or any other, is refused.
		{"ipv4/own address, another endpoint's MAC", devEP0, withSMAC(tcp4(tb, epPeer.v4), epPeer.mac), dropped(dropSpoofed)},
		{"ipv6/own address, another endpoint's MAC", devEP0, withSMAC(tcp6(tb, epPeer.v6), epPeer.mac), dropped(dropSpoofed)},
		{"ipv4/own address, made-up MAC", devEP0, withSMAC(tcp4(tb, addr("203.0.113.9")), mac("02:de:ad:be:ef:01")), dropped(dropSpoofed)},
		// Link-scope sources own no MAC: they go to Linux as before.
		{"ipv6/link-local source, another MAC", devEP0, withSMAC(pktSpec{src: addr("fe80::1"), dst: epPeer.v6}.frame(tb), epPeer.mac), passed(passLinkLocal)},
	}
}

// withSMAC is frame sent from another source MAC.
func withSMAC(frame []byte, m net.HardwareAddr) []byte {
	return edit(frame, func(b []byte) { copy(b[6:12], m) })
}

func linkScopeCases(tb testing.TB) []verdictCase {
	udp, icmp6 := layers.IPProtocolUDP, layers.IPProtocolICMPv6
	return []verdictCase{
		{"ipv6/link-local source", devEP0, pktSpec{src: addr("fe80::1"), dst: epPeer.v6}.frame(tb), passed(passLinkLocal)},
		{"ipv6/link-local to link-local", devEP0, pktSpec{src: addr("fe80::1"), dst: addr("fe80::2"), proto: icmp6}.frame(tb), passed(passLinkLocal)},
		{"ipv6/unspecified source (DAD)", devEP0, pktSpec{src: addr("::"), dst: addr("ff02::1:ff00:2"), proto: icmp6}.frame(tb), passed(passLinkLocal)},
		{"ipv6/link-local destination", devEP0, pktSpec{src: epSrc.v6, dst: addr("fe80::2")}.frame(tb), passed(passLinkLocal)},
		{"ipv6/multicast destination", devEP0, pktSpec{src: epSrc.v6, dst: addr("ff02::1"), proto: udp}.frame(tb), passed(passLinkLocal)},
		{"ipv4/broadcast destination", devEP0, pktSpec{src: epSrc.v4, dst: addr("255.255.255.255"), proto: udp}.frame(tb), passed(passLinkLocal)},
		{"ipv4/multicast destination", devEP0, pktSpec{src: epSrc.v4, dst: addr("224.0.0.251"), proto: udp}.frame(tb), passed(passLinkLocal)},
		{"ipv4/DHCP discover", devEP0, pktSpec{src: addr("0.0.0.0"), dst: addr("255.255.255.255"), proto: udp}.frame(tb), passed(passLinkLocal)},
	}
}

func ttlCases(tb testing.TB) []verdictCase {
	ttl0 := edit(tcp4(tb, epPeer.v4), func(b []byte) {
		hdr := b[ethHdrLen : ethHdrLen+20]
		hdr[8] = 0
		binary.BigEndian.PutUint16(hdr[10:], ipv4HeaderChecksum(hdr))
	})
	return []verdictCase{
		{"ipv4/ttl 1", devEP0, pktSpec{src: epSrc.v4, dst: epPeer.v4, ttl: 1}.frame(tb), passed(passTTL)},
		{"ipv4/ttl 0", devEP0, ttl0, passed(passTTL)},
		{"ipv4/ttl 1 routed", devEP0, pktSpec{src: epSrc.v4, dst: addr("203.0.113.9"), ttl: 1}.frame(tb), passed(passTTL)},
		{"ipv6/hop limit 1", devEP0, pktSpec{src: epSrc.v6, dst: epPeer.v6, ttl: 1}.frame(tb), passed(passTTL)},
		{"ipv6/hop limit 0", devEP0, edit(tcp6(tb, epPeer.v6), func(b []byte) { b[ethHdrLen+7] = 0 }), passed(passTTL)},
	}
}

func TestFromEndpointSpoofing(t *testing.T) { runCases(t, spoofCases(t)) }

func TestFromEndpointLinkScope(t *testing.T) { runCases(t, linkScopeCases(t)) }

func TestFromEndpointTTL(t *testing.T) { runCases(t, ttlCases(t)) }
