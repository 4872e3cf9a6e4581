package fqdn

import (
	"encoding/binary"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// udp is a UDP datagram as the tap reads it (from its IP header on).
type udp struct {
	src, dst     netip.Addr
	sport, dport uint16
	payload      []byte
}

// parseIP reads an IPv4 or IPv6 packet (no IPv6 extension headers, no
// fragments): its addresses, protocol and transport bytes.
func parseIP(b []byte) (src, dst netip.Addr, proto uint8, l4 []byte, ok bool) {
	if len(b) < 1 {
		return src, dst, 0, nil, false
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return src, dst, 0, nil, false
		}
		ihl := int(b[0]&0xf) * 4
		total := int(binary.BigEndian.Uint16(b[2:4]))
		if ihl < 20 || total < ihl || total > len(b) || binary.BigEndian.Uint16(b[6:8])&0x3fff != 0 {
			return src, dst, 0, nil, false
		}
		return netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20])), b[9], b[ihl:total], true
	case 6:
		if len(b) < 40 {
			return src, dst, 0, nil, false
		}
		plen := int(binary.BigEndian.Uint16(b[4:6]))
		if 40+plen > len(b) {
			return src, dst, 0, nil, false
		}
		return netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40])), b[6], b[40 : 40+plen], true
	}
	return src, dst, 0, nil, false
}

// parseSYN reads a TCP SYN without ACK: its addresses.
func parseSYN(b []byte) (src, dst netip.Addr, ok bool) {
	src, dst, proto, l4, ok := parseIP(b)
	if !ok || proto != 6 || len(l4) < 20 || l4[13]&0x12 != 0x02 {
		return src, dst, false
	}
	return src.Unmap(), dst.Unmap(), true
}

// parseUDP reads an IPv4 or IPv6 packet carrying UDP (no IPv6 extension
// headers, no fragments); ok is false for anything else.
func parseUDP(b []byte) (u udp, ok bool) {
	src, dst, proto, l4, ok := parseIP(b)
	if !ok || proto != 17 {
		return u, false
	}
	u.src, u.dst = src, dst
	if len(l4) < 8 {
		return u, false
	}
	ulen := int(binary.BigEndian.Uint16(l4[4:6]))
	if ulen < 8 || ulen > len(l4) {
		return u, false
	}
	u.sport = binary.BigEndian.Uint16(l4[0:2])
	u.dport = binary.BigEndian.Uint16(l4[2:4])
	u.payload = l4[8:ulen]
	return u, true
}

// question is the first question of a DNS message and its id.
type question struct {
	id   uint16
	name string // canonical
	typ  dnsmessage.Type
}

// parseQuery reads a DNS query (one question).
func parseQuery(b []byte) (question, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil || h.Response {
		return question{}, false
	}
	q, err := p.Question()
	if err != nil {
		return question{}, false
	}
	return question{id: h.ID, name: rules.CanonicalName(q.Name.String()), typ: q.Type}, true
}

// answer is what a DNS answer says of its question's name: the addresses
// (A and AAAA records of the name or of the CNAME chain from it) and the
// shortest TTL of the records on the way.
type answer struct {
	question
	addrs []netip.Addr
	ttl   time.Duration
	fresh []netip.Addr // tracker.observe: addrs the endpoint had no live answer for
}

// parseAnswer reads a DNS response with rcode success. The chain is
// followed through at most 8 CNAMEs, in any order of the records.
func parseAnswer(b []byte) (answer, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil || !h.Response || h.RCode != dnsmessage.RCodeSuccess {
		return answer{}, false
	}
	q, err := p.Question()
	if err != nil {
		return answer{}, false
	}
	if err := p.SkipAllQuestions(); err != nil {
		return answer{}, false
	}
	a := answer{question: question{id: h.ID, name: rules.CanonicalName(q.Name.String()), typ: q.Type}}
	type rec struct {
		name, cname string
		addr        netip.Addr
		ttl         uint32
	}
	var recs []rec
	for {
		rh, err := p.AnswerHeader()
		if err == dnsmessage.ErrSectionDone {
			break
		}
		if err != nil {
			return answer{}, false
		}
		r := rec{name: rules.CanonicalName(rh.Name.String()), ttl: rh.TTL}
		switch rh.Type {
		case dnsmessage.TypeA:
			v, err := p.AResource()
			if err != nil {
				return answer{}, false
			}
			r.addr = netip.AddrFrom4(v.A)
		case dnsmessage.TypeAAAA:
			v, err := p.AAAAResource()
			if err != nil {
				return answer{}, false
			}
			r.addr = netip.AddrFrom16(v.AAAA)
		case dnsmessage.TypeCNAME:
			v, err := p.CNAMEResource()
			if err != nil {
				return answer{}, false
			}
			r.cname = rules.CanonicalName(v.CNAME.String())
		default:
			if err := p.SkipAnswer(); err != nil {
				return answer{}, false
			}
			continue
		}
		recs = append(recs, r)
	}
	name, ttl := a.name, ^uint32(0)
	for range 9 {
		next := ""
		for _, r := range recs {
			if r.name != name {
				continue
			}
			if r.addr.IsValid() {
				a.addrs = append(a.addrs, r.addr)
				ttl = min(ttl, r.ttl)
			} else if next == "" {
				next, ttl = r.cname, min(ttl, r.ttl)
			}
		}
		if len(a.addrs) > 0 || next == "" {
			break
		}
		name = next
	}
	if len(a.addrs) == 0 {
		return answer{}, false
	}
	a.ttl = time.Duration(ttl) * time.Second
	return a, true
}

// fixTCPChecksum computes the TCP checksum of packet (a copy of a
// segment the endpoint sent: with checksum offload its field holds only
// the pseudo-header's sum) in place.
func fixTCPChecksum(packet []byte) bool {
	src, dst, proto, l4, ok := parseIP(packet)
	if !ok || proto != 6 || len(l4) < 20 {
		return false
	}
	l4[16], l4[17] = 0, 0
	var sum uint32
	add := func(b []byte) {
		for len(b) >= 2 {
			sum += uint32(binary.BigEndian.Uint16(b))
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	sum += 6 + uint32(len(l4))
	add(l4)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(l4[16:], ^uint16(sum))
	return true
}
