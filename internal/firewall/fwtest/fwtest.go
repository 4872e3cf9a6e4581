package fwtest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/xlane-dev/xlane/internal/firewall"
)

// Networks of the fixed node.
var Networks = map[string]uint32{"blue": 1, "red": 2, "green": 3}

// Endpoints of the fixed node.
var Endpoints = map[string]firewall.EndpointInfo{
	"b1": {Network: 1, Addrs: []netip.Addr{addr("10.1.0.2"), addr("fd00:1::2")}},
	"b2": {Network: 1, Addrs: []netip.Addr{addr("10.1.0.3"), addr("fd00:1::3")}},
	"r1": {Network: 2, Addrs: []netip.Addr{addr("10.2.0.2"), addr("fd00:2::2")}},
	"g1": {Network: 3, Addrs: []netip.Addr{addr("10.3.0.2")}},
}

// EndpointIDs in a fixed order.
var EndpointIDs = []string{"b1", "b2", "r1", "g1"}

// NetworkNames in a fixed order.
var NetworkNames = []string{"blue", "red", "green"}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// Resolver resolves scopes against the fixed node.
func Resolver() firewall.MapResolver {
	return firewall.MapResolver{Networks: Networks, Endpoints: Endpoints}
}

// Address pools: rules take prefixes around these, packets addresses in
// them, so that prefixes nest and overlap.
var (
	bases4 = []string{"10.1.0.0", "10.2.0.0", "10.3.0.0", "192.0.2.0", "198.51.100.0", "203.0.113.0", "10.1.0.2", "10.2.0.2"}
	bases6 = []string{"fd00:1::", "fd00:2::", "2001:db8::", "2001:db8:1::", "fd00:1::2", "fd00:2::2"}
	ports  = []int{22, 53, 80, 443, 1000, 1024, 8080, 65535, 0, 1}
	macs   = []string{"02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// randPrefix returns a prefix around a base address, of a random length.
func randPrefix(r *rand.Rand, v6 bool) string {
	if v6 {
		return fmt.Sprintf("%s/%d", pick(r, bases6), pick(r, []int{0, 16, 32, 48, 64, 112, 126, 128}))
	}
	return fmt.Sprintf("%s/%d", pick(r, bases4), pick(r, []int{0, 8, 16, 24, 28, 30, 31, 32}))
}

func randPort(r *rand.Rand) string {
	p := pick(r, ports)
	switch r.IntN(4) {
	case 0:
		hi := p + r.IntN(2000)
		if hi > 65535 {
			hi = 65535
		}
		return fmt.Sprintf("%d-%d", p, hi)
	case 1:
		return strconv.Itoa(r.IntN(65536))
	}
	return strconv.Itoa(p)
}

// RandomRuleSet makes n rules (and maybe default policies) over the
// fixed node. Every rule is valid; established is off (a differential
// test classifies every packet).
func RandomRuleSet(r *rand.Rand, n int) *firewall.RuleSet {
	f := false
	rs := &firewall.RuleSet{Established: &f}
	logs := 0
	for i := 0; i < n; i++ {
		rule := firewall.Rule{Name: fmt.Sprintf("r%d", i)}
		rule.Action = pick(r, []string{"allow", "drop", "drop", "reject", "allow"})
		if logs < 8 && r.IntN(40) == 0 {
			rule.Action = "log"
			logs++
		}
		if r.IntN(3) == 0 {
			rule.Priority = 1 + r.IntN(2000)
		}
		switch r.IntN(6) {
		case 0:
			rule.Scope = "uplink"
		case 1:
			rule.Scope = "network:" + pick(r, NetworkNames)
		case 2:
			rule.Scope = "endpoint:" + pick(r, EndpointIDs)
		}
		if rule.Scope != "uplink" {
			rule.Direction = pick(r, []string{"", "from-endpoint", "to-endpoint"})
		}
		v6 := r.IntN(3) == 0
		if r.IntN(4) == 0 {
			rule.Family = "ipv4"
			if v6 {
				rule.Family = "ipv6"
			}
		}
		proto := ""
		switch r.IntN(8) {
		case 0, 1, 2:
			proto = "tcp"
		case 3, 4:
			proto = "udp"
		case 5:
			proto = "icmp"
			if v6 {
				proto = "icmpv6"
			}
		case 6:
			rule.Proto = firewall.List{"tcp", "udp"}
		}
		if proto != "" {
			rule.Proto = firewall.List{proto}
		}
		if r.IntN(2) == 0 {
			rule.Src = firewall.List{randPrefix(r, v6)}
			if r.IntN(4) == 0 {
				rule.Src = append(rule.Src, randPrefix(r, !v6))
			}
		}
		if r.IntN(2) == 0 {
			rule.Dst = firewall.List{randPrefix(r, v6)}
		}
		tcpudp := proto == "tcp" || proto == "udp" || len(rule.Proto) == 2
		if tcpudp && r.IntN(2) == 0 {
			rule.DstPort = firewall.List{randPort(r)}
			if r.IntN(3) == 0 {
				rule.DstPort = append(rule.DstPort, randPort(r))
			}
		}
		if tcpudp && r.IntN(5) == 0 {
			rule.SrcPort = firewall.List{randPort(r)}
		}
		if (proto == "icmp" || proto == "icmpv6") && r.IntN(2) == 0 {
			t := pick(r, []string{"8", "0", "3/4", "3", "128", "129", "1/4"})
			rule.ICMPType = firewall.List{t}
		}
		if proto == "tcp" && r.IntN(4) == 0 {
			rule.TCPFlags = pick(r, []string{"syn", "SYN,ACK/ACK", "RST/RST", "FIN,SYN,RST,ACK/SYN,ACK"})
		}
		if r.IntN(12) == 0 {
			rule.SrcMAC = firewall.List{pick(r, macs)}
		}
		if r.IntN(15) == 0 {
			rule.DstMAC = firewall.List{pick(r, macs)}
		}
		if _, err := firewall.Validate(&firewall.RuleSet{Rules: []firewall.Rule{rule}}, Resolver()); err != nil {
			i-- // e.g. an endpoint scope whose addresses miss src: draw again
			continue
		}
		rs.Rules = append(rs.Rules, rule)
	}
	for _, s := range []string{"", "uplink", "network:blue", "endpoint:r1", "network:red"} {
		if r.IntN(3) != 0 {
			continue
		}
		d := firewall.Default{Scope: s, Action: pick(r, []string{"allow", "drop", "reject"})}
		if s != "uplink" {
			d.Direction = pick(r, []string{"", "from-endpoint", "to-endpoint"})
		}
		rs.Defaults = append(rs.Defaults, d)
	}
	return rs
}

// randAddr returns an address in a random prefix of the pools (or an
// endpoint's).
func randAddr(r *rand.Rand, v6 bool) netip.Addr {
	base := pick(r, bases4)
	if v6 {
		base = pick(r, bases6)
	}
	a := addr(base).As16()
	if r.IntN(3) != 0 { // a neighbour of the base, else the base itself
		a[15] ^= byte(r.IntN(8))
	}
	if r.IntN(6) == 0 {
		a[r.IntN(16)] ^= byte(r.IntN(256))
	}
	out := netip.AddrFrom16(a)
	if !v6 {
		b := out.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return out
}

// RandomPacket makes a packet for hook kind k. A from-endpoint packet's
// source (a to-endpoint packet's destination) is an endpoint's address:
// the datapath classifies only those; net is that endpoint's network.
func RandomPacket(r *rand.Rand, k firewall.Kind) firewall.Packet {
	var pk firewall.Packet
	pk.Kind = k
	v6 := r.IntN(3) == 0
	if k != firewall.KindUplink {
		id := pick(r, EndpointIDs)
		ep := Endpoints[id]
		var a netip.Addr
		for _, x := range ep.Addrs {
			if x.Is6() == v6 {
				a = x
			}
		}
		if !a.IsValid() {
			a, v6 = ep.Addrs[0], ep.Addrs[0].Is6()
		}
		pk.Net = ep.Network
		if k == firewall.KindFromEP {
			pk.Src, pk.Dst = a, randAddr(r, v6)
			// Not another endpoint: its to-endpoint stage would run too.
			for isEndpoint(pk.Dst) {
				pk.Dst = randAddr(r, v6)
			}
		} else {
			pk.Src, pk.Dst = randAddr(r, v6), a
		}
	} else {
		pk.Src, pk.Dst = randAddr(r, v6), randAddr(r, v6)
	}
	pk.SMAC = [6]byte(mustMAC(pick(r, macs)))
	pk.DMAC = [6]byte(mustMAC(pick(r, macs)))
	pk.SPort, pk.DPort = firewall.NoL4, firewall.NoL4
	switch r.IntN(10) {
	case 0, 1, 2, 3:
		pk.Proto = 6
		pk.Flags = pick(r, []uint8{0x02, 0x12, 0x10, 0x18, 0x04, 0x11, 0x01})
	case 4, 5, 6:
		pk.Proto = 17
	case 7, 8:
		pk.Proto = 1
		if v6 {
			pk.Proto = 58
		}
		pk.DPort = uint32(pick(r, []int{8, 0, 3, 128, 129, 11}))
		pk.SPort = uint32(pick(r, []int{0, 4, 3}))
		return pk
	default:
		pk.Proto = 47 // GRE: no ports
		return pk
	}
	pk.SPort = uint32(randPortValue(r))
	pk.DPort = uint32(randPortValue(r))
	return pk
}

func randPortValue(r *rand.Rand) int {
	p := pick(r, ports)
	switch r.IntN(4) {
	case 0:
		p += r.IntN(3) - 1
	case 1:
		p = r.IntN(65536)
	}
	if p < 0 {
		p = 0
	}
	if p > 65535 {
		p = 65535
	}
	return p
}

func isEndpoint(a netip.Addr) bool {
	for _, e := range Endpoints {
		for _, x := range e.Addrs {
			if x == a {
				return true
			}
		}
	}
	return false
}

func mustMAC(s string) []byte {
	hw, err := parseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}

// Frame builds the Ethernet frame of pk (TTL 64, a short payload).
func Frame(pk firewall.Packet) ([]byte, error) {
	eth := &layers.Ethernet{SrcMAC: pk.SMAC[:], DstMAC: pk.DMAC[:]}
	var net gopacket.NetworkLayer
	var ls []gopacket.SerializableLayer
	if pk.Src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, SrcIP: pk.Src.AsSlice(), DstIP: pk.Dst.AsSlice(), Protocol: layers.IPProtocol(pk.Proto)}
		net = ip
		ls = append(ls, eth, ip)
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: pk.Src.AsSlice(), DstIP: pk.Dst.AsSlice(), NextHeader: layers.IPProtocol(pk.Proto)}
		net = ip
		ls = append(ls, eth, ip)
	}
	payload := gopacket.Payload("xlane firewall test payload")
	switch pk.Proto {
	case 6:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(pk.SPort), DstPort: layers.TCPPort(pk.DPort), Seq: 1, Window: 1000, DataOffset: 5}
		tcp.FIN, tcp.SYN, tcp.RST, tcp.PSH = pk.Flags&1 != 0, pk.Flags&2 != 0, pk.Flags&4 != 0, pk.Flags&8 != 0
		tcp.ACK, tcp.URG, tcp.ECE, tcp.CWR = pk.Flags&16 != 0, pk.Flags&32 != 0, pk.Flags&64 != 0, pk.Flags&128 != 0
		tcp.SetNetworkLayerForChecksum(net)
		ls = append(ls, tcp, payload)
	case 17:
		udp := &layers.UDP{SrcPort: layers.UDPPort(pk.SPort), DstPort: layers.UDPPort(pk.DPort)}
		udp.SetNetworkLayerForChecksum(net)
		ls = append(ls, udp, payload)
	case 1:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(uint8(pk.DPort), uint8(pk.SPort)), Id: 7, Seq: 1}, payload)
	case 58:
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(uint8(pk.DPort), uint8(pk.SPort))}
		ic.SetNetworkLayerForChecksum(net)
		ls = append(ls, ic, gopacket.Payload("\x00\x07\x00\x01xlane firewall test payload"))
	default:
		ls = append(ls, payload)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Pools of the tuple sets: few enough that rules share sources and ports
// and packets hit them.
var (
	tupleSrcs  = []string{"203.0.113.1", "203.0.113.2", "203.0.113.3", "198.51.100.7", "192.0.2.9", "10.9.0.1"}
	tuplePorts = []int{0, 9, 22, 53, 80, 443, 65535}
)

// RandomTupleSet makes n uplink rules of the uplink's tuple shape (one or
// two protocols, /32 sources, destination ports; lists of them), actions
// drop, allow and reject, and sometimes an uplink default, sometimes an
// all-scope default behind it, sometimes IPv6 rules (other families do
// not matter to the IPv4 tuples).
func RandomTupleSet(r *rand.Rand, n int) *firewall.RuleSet {
	rs := &firewall.RuleSet{}
	for i := range n {
		ru := firewall.Rule{Name: fmt.Sprintf("t%d", i), Scope: pick(r, []string{"uplink", "uplink", "all"}),
			Action: pick(r, []string{"drop", "allow", "reject"}), Priority: r.IntN(3) * 100}
		if ru.Scope == "all" {
			ru.Direction = "any"
		}
		for range 1 + r.IntN(2) {
			ru.Proto = append(ru.Proto, pick(r, []string{"tcp", "udp", "udp", "icmp"}))
		}
		if r.IntN(8) == 0 {
			ru.Src = firewall.List{pick(r, bases6) + "/128"} // IPv6 only
			ru.Proto = firewall.List{"tcp"}
		} else {
			for range 1 + r.IntN(2) {
				ru.Src = append(ru.Src, pick(r, tupleSrcs))
			}
		}
		if slices.Contains(ru.Proto, "icmp") {
			ru.Proto = firewall.List{"icmp"}
			ru.ICMPType = firewall.List{pick(r, []string{"8", "0", "3"})}
		} else {
			for range 1 + r.IntN(2) {
				ru.DstPort = append(ru.DstPort, strconv.Itoa(pick(r, tuplePorts)))
			}
		}
		rs.Rules = append(rs.Rules, ru)
	}
	switch r.IntN(3) {
	case 0:
		rs.Defaults = append(rs.Defaults, firewall.Default{Scope: "uplink", Action: pick(r, []string{"drop", "allow", "reject"})})
	case 1:
		rs.Defaults = append(rs.Defaults, firewall.Default{Scope: "all", Action: "drop"})
	}
	return rs
}

// RandomTuplePacket makes an uplink packet for a tuple set: mostly IPv4
// from the tuple pools, some outside them, some without ports (GRE).
func RandomTuplePacket(r *rand.Rand) firewall.Packet {
	pk := RandomPacket(r, firewall.KindUplink)
	if pk.Src.Is6() && r.IntN(2) == 0 {
		pk.Src = addr(pick(r, bases6))
		return pk
	}
	if pk.Src.Is6() {
		pk = RandomPacket(r, firewall.KindUplink)
		if pk.Src.Is6() {
			return pk
		}
	}
	if r.IntN(5) != 0 {
		pk.Src = addr(pick(r, tupleSrcs))
	}
	if pk.Proto == 6 || pk.Proto == 17 {
		if r.IntN(4) != 0 {
			pk.DPort = uint32(pick(r, tuplePorts))
		}
	}
	return pk
}

// RandomTieredRuleSet is RandomRuleSet with tiers: its rules' priorities
// fall in three tiers (1-999, 1000-1999, 2000-2999) and about one rule in
// eight is a pass rule going on at the start of a later tier, or past
// every rule (3000: the defaults), so that a packet can pass twice.
func RandomTieredRuleSet(r *rand.Rand, n int) *firewall.RuleSet {
	rs := RandomRuleSet(r, n)
	for i := range rs.Rules {
		rule := &rs.Rules[i]
		tier := r.IntN(3)
		rule.Priority = tier*1000 + 1 + r.IntN(999)
		if rule.Action != "log" && r.IntN(8) == 0 {
			rule.Action, rule.Log = "pass", 0
			rule.PassTo = (tier + 1 + r.IntN(3-tier)) * 1000
		}
	}
	return rs
}

// PassCase is a packet of PassTiers and the rule that decides it ("":
// none, allowed).
type PassCase struct {
	Src   string
	DPort uint32
	Want  string
}

// PassTiers is a rule set of three tiers with a pass rule in the first
// (to the second) and in the last (past every rule), and the packets,
// TCP to the endpoint b1 (10.1.0.2), that tell the pass rules work.
func PassTiers() (*firewall.RuleSet, []PassCase) {
	f := false
	return &firewall.RuleSet{Established: &f, Rules: []firewall.Rule{
			// admin tier (priority < 100)
			{Name: "admin-pass-web", Priority: 10, Action: "pass", PassTo: 100, Proto: firewall.List{"tcp"}, DstPort: firewall.List{"80"}},
			{Name: "admin-deny-10", Priority: 20, Action: "drop", Src: firewall.List{"10.0.0.0/8"}},
			// the middle tier (NetworkPolicy)
			{Name: "np-allow-22", Priority: 100, Action: "allow", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"22"}},
			{Name: "np-deny-443", Priority: 101, Action: "drop", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"443"}},
			// baseline (priority >= 200)
			{Name: "base-pass-80", Priority: 200, Action: "pass", PassTo: 300, Proto: firewall.List{"tcp"}, DstPort: firewall.List{"80"}, Src: firewall.List{"10.1.0.0/16"}},
			{Name: "base-deny", Priority: 210, Action: "drop"},
		}}, []PassCase{
			{"10.1.2.3", 80, ""},               // admin pass, baseline pass: nothing decides
			{"10.2.2.3", 80, "base-deny"},      // admin pass skips admin-deny-10; baseline denies
			{"10.2.2.3", 22, "admin-deny-10"},  // no pass: the admin tier decides
			{"192.0.2.1", 22, "np-allow-22"},   // the middle tier decides
			{"192.0.2.1", 443, "np-deny-443"},  //
			{"192.0.2.1", 8080, "base-deny"},   // nothing above: baseline
			{"10.1.2.3", 443, "admin-deny-10"}, // the pass is for port 80 only
			{"192.0.2.1", 80, "base-deny"},     // admin pass, baseline's pass is for 10.1/16 only
		}
}

// Packet is a PassCase's packet at hook k.
func (c PassCase) Packet(k firewall.Kind) firewall.Packet {
	return firewall.Packet{Kind: k, Net: 1, Src: netip.MustParseAddr(c.Src), Dst: netip.MustParseAddr("10.1.0.2"),
		Proto: 6, SPort: 40000, DPort: c.DPort, Flags: 0x02}
}
