package fqdn

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/ktime"
	"golang.org/x/net/dns/dnsmessage"
)

var (
	pod    = netip.MustParseAddr("10.91.0.3")
	pod6   = netip.MustParseAddr("fd00:91::3")
	server = netip.MustParseAddr("10.91.0.4")
	other  = netip.MustParseAddr("10.91.0.5")
)

// ipUDP builds an IPv4 or IPv6 packet with a UDP datagram (checksums
// are not read).
func ipUDP(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	u := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], payload)
	if src.Is4() {
		h := make([]byte, 20)
		h[0], h[8], h[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(u)))
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		return append(h, u...)
	}
	h := make([]byte, 40)
	h[0], h[6], h[7] = 0x60, 17, 64
	binary.BigEndian.PutUint16(h[4:], uint16(len(u)))
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, u...)
}

func dnsQuery(t *testing.T, id uint16, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rr is an answer record: an address or a CNAME target.
type rr struct {
	name  string
	ttl   uint32
	addr  string
	cname string
}

func dnsAnswer(t *testing.T, id uint16, name string, typ dnsmessage.Type, rcode dnsmessage.RCode, rrs ...rr) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, Response: true, RCode: rcode})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	b.StartAnswers()
	for _, r := range rrs {
		h := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(r.name), Class: dnsmessage.ClassINET, TTL: r.ttl}
		var err error
		switch {
		case r.cname != "":
			err = b.CNAMEResource(h, dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(r.cname)})
		case netip.MustParseAddr(r.addr).Is4():
			err = b.AResource(h, dnsmessage.AResource{A: netip.MustParseAddr(r.addr).As4()})
		default:
			err = b.AAAAResource(h, dnsmessage.AAAAResource{AAAA: netip.MustParseAddr(r.addr).As16()})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTracker: which answers an endpoint's tracker accepts (one matching
// a query it sent: id, port, server, question), the TTL bounds, CNAME
// chains, and the end of the TTL.
func TestTracker(t *testing.T) {
	now := time.Unix(1000, 0)
	q := func(tr *tracker, id, port uint16, to netip.Addr, name string, typ dnsmessage.Type) {
		t.Helper()
		if _, v := tr.observe(ipUDP(pod, to, port, 53, dnsQuery(t, id, name, typ)), now); v != seenQuery {
			t.Fatalf("query %s: %s", name, v)
		}
	}
	a := func(tr *tracker, id, port uint16, from netip.Addr, name string, typ dnsmessage.Type, rrs ...rr) (answer, string) {
		return tr.observe(ipUDP(from, pod, 53, port, dnsAnswer(t, id, name, typ, dnsmessage.RCodeSuccess, rrs...)), now)
	}
	A := dnsmessage.TypeA
	addr := rr{name: "api.example.com.", ttl: 30, addr: "93.184.215.14"}

	for _, c := range []struct {
		name string
		// the answer's id, port, source, question
		id, port uint16
		from     netip.Addr
		qname    string
		typ      dnsmessage.Type
		rrs      []rr
		verdict  string
		ttl      time.Duration
		addrs    []string
	}{
		{"accepted", 7, 40000, server, "api.example.com.", A, []rr{addr}, seenAnswer, 30 * time.Second, []string{"93.184.215.14"}},
		{"spoofed from another endpoint", 7, 40000, other, "api.example.com.", A, []rr{addr}, seenUnsolicited, 0, nil},
		{"other id", 8, 40000, server, "api.example.com.", A, []rr{addr}, seenUnsolicited, 0, nil},
		{"other port", 7, 40001, server, "api.example.com.", A, []rr{addr}, seenUnsolicited, 0, nil},
		{"other question", 7, 40000, server, "evil.example.com.", A, []rr{{name: "evil.example.com.", ttl: 30, addr: "6.6.6.6"}}, seenUnsolicited, 0, nil},
		{"other type", 7, 40000, server, "api.example.com.", dnsmessage.TypeAAAA, []rr{{name: "api.example.com.", ttl: 30, addr: "2001:db8::1"}}, seenUnsolicited, 0, nil},
		{"ttl 0: MinTTL", 7, 40000, server, "api.example.com.", A, []rr{{name: "api.example.com.", ttl: 0, addr: "93.184.215.14"}}, seenAnswer, MinTTL, []string{"93.184.215.14"}},
		{"ttl a day: MaxTTL", 7, 40000, server, "api.example.com.", A, []rr{{name: "api.example.com.", ttl: 86400, addr: "93.184.215.14"}}, seenAnswer, MaxTTL, []string{"93.184.215.14"}},
		{"cname chain: the shortest ttl, the chain's addresses only", 7, 40000, server, "api.example.com.", A, []rr{
			{name: "cdn.example.net.", ttl: 60, addr: "198.51.100.7"},
			{name: "api.example.com.", ttl: 20, cname: "edge.example.com."},
			{name: "unrelated.example.org.", ttl: 60, addr: "6.6.6.6"},
			{name: "edge.example.com.", ttl: 40, cname: "cdn.example.net."},
		}, seenAnswer, 20 * time.Second, []string{"198.51.100.7"}},
	} {
		tr := newTracker([]netip.Addr{pod, pod6})
		q(tr, 7, 40000, server, "api.example.com.", A)
		got, v := a(tr, c.id, c.port, c.from, c.qname, c.typ, c.rrs...)
		if v != c.verdict {
			t.Errorf("%s: %s, want %s", c.name, v, c.verdict)
			continue
		}
		var addrs []string
		for _, x := range got.addrs {
			addrs = append(addrs, x.String())
		}
		if got.ttl != c.ttl || !slices.Equal(addrs, c.addrs) {
			t.Errorf("%s: ttl %v addrs %v, want %v %v", c.name, got.ttl, addrs, c.ttl, c.addrs)
		}
		if c.verdict == seenAnswer {
			if _, v := a(tr, c.id, c.port, c.from, c.qname, c.typ, c.rrs...); v != seenUnsolicited {
				t.Errorf("%s: the same answer twice: %s, want %s (a query is answered once)", c.name, v, seenUnsolicited)
			}
			if until := tr.names["api.example.com"][got.addrs[0]]; !until.Equal(now.Add(c.ttl)) {
				t.Errorf("%s: kept until %v, want %v", c.name, until, now.Add(c.ttl))
			}
		}
	}

	// An answer after queryTimeout is not accepted; what was accepted
	// ends with its TTL.
	tr := newTracker([]netip.Addr{pod})
	q(tr, 9, 40000, server, "api.example.com.", A)
	now = now.Add(queryTimeout + time.Second)
	if _, v := a(tr, 9, 40000, server, "api.example.com.", A, addr); v != seenUnsolicited {
		t.Errorf("late answer: %s", v)
	}
	q(tr, 10, 40000, server, "api.example.com.", A)
	if _, v := a(tr, 10, 40000, server, "api.example.com.", A, addr); v != seenAnswer {
		t.Errorf("answer: %s", v)
	}
	now = now.Add(30 * time.Second)
	tr.expire(now)
	if len(tr.names) != 0 {
		t.Errorf("after the TTL: %v", tr.names)
	}
	// Not the endpoint's: an answer to another address, a query from one.
	if _, v := tr.observe(ipUDP(server, other, 53, 40000, dnsAnswer(t, 1, "a.example.com.", A, 0, addr)), now); v != seenOther {
		t.Errorf("answer to another address: %s", v)
	}
	if _, v := tr.observe(ipUDP(other, server, 40000, 53, dnsQuery(t, 1, "a.example.com.", A)), now); v != seenOther {
		t.Errorf("query from another address: %s", v)
	}
	// Pending queries are bounded.
	for i := range maxPending + 1 {
		_, v := tr.observe(ipUDP(pod, server, uint16(1000+i), 53, dnsQuery(t, 1, "a.example.com.", A)), now)
		if want := map[bool]string{true: seenTooMany, false: seenQuery}[i == maxPending]; v != want {
			t.Fatalf("query %d: %s, want %s", i, v, want)
		}
	}
}

// fakeMap is xlane_fw_resolved in memory.
type fakeMap map[string]uint64

func (m fakeMap) Put(slot uint32, src, dst netip.Addr, expires uint64) error {
	m[key(slot, src, dst)] = expires
	return nil
}
func (m fakeMap) Delete(slot uint32, src, dst netip.Addr) error {
	delete(m, key(slot, src, dst))
	return nil
}
func (m fakeMap) Range(fn func(uint32, netip.Addr, netip.Addr, uint64)) error { return nil }

func key(slot uint32, src, dst netip.Addr) string {
	return netip.AddrPortFrom(src, uint16(slot)).String() + ">" + dst.String()
}

// TestPut: an accepted answer becomes entries for the rules whose names
// match, from each of the endpoint's addresses of the answer's family
// that the rule's sources hold; a rule set later gets what the endpoint
// resolved before (SetRules).
func TestPut(t *testing.T) {
	m := fakeMap{}
	f := &FQDN{m: m, eps: map[string]*epTap{}, stats: map[string]uint64{}, kick: make(chan struct{}, 1)}
	tr := newTracker([]netip.Addr{pod, pod6})
	f.eps["c1"] = &epTap{t: tr}
	now := time.Now()
	tr.observe(ipUDP(pod, server, 40000, 53, dnsQuery(t, 1, "api.example.com.", dnsmessage.TypeA)), now)
	tr.observe(ipUDP(pod, server, 40000, 53, dnsQuery(t, 2, "api.example.com.", dnsmessage.TypeAAAA)), now)
	tr.observe(ipUDP(server, pod, 53, 40000, dnsAnswer(t, 1, "api.example.com.", dnsmessage.TypeA, 0, rr{name: "api.example.com.", ttl: 30, addr: "93.184.215.14"})), now)
	tr.observe(ipUDP(server, pod, 53, 40000, dnsAnswer(t, 2, "api.example.com.", dnsmessage.TypeAAAA, 0, rr{name: "api.example.com.", ttl: 30, addr: "2001:db8::14"})), now)
	f.SetRules([]Rule{
		{Slot: 1, Names: []string{"*.example.com"}},
		{Slot: 2, Names: []string{"example.com"}}, // the apex only
		{Slot: 3, Names: []string{"api.example.com"}, Src: []netip.Prefix{netip.MustParsePrefix("fd00:91::/64")}}, // IPv6 sources only
	})
	want := []string{
		key(1, pod, netip.MustParseAddr("93.184.215.14")),
		key(1, pod6, netip.MustParseAddr("2001:db8::14")),
		key(3, pod6, netip.MustParseAddr("2001:db8::14")),
	}
	var got []string
	for k, exp := range m {
		got = append(got, k)
		if d := time.Duration(exp - ktime.Now()); d < 25*time.Second || d > 31*time.Second {
			t.Errorf("%s expires in %v, want about 30 s", k, d)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
}

// TestSYN: parseSYN takes a SYN without ACK only; fixTCPChecksum gives a
// segment whose sum over the pseudo-header checks out.
func TestSYN(t *testing.T) {
	for _, c := range []struct {
		src, dst netip.Addr
	}{{pod, netip.MustParseAddr("93.184.215.14")}, {pod6, netip.MustParseAddr("2001:db8::14")}} {
		tcp := make([]byte, 20)
		binary.BigEndian.PutUint16(tcp[0:], 40000)
		binary.BigEndian.PutUint16(tcp[2:], 443)
		tcp[12], tcp[13] = 5<<4, 0x02
		pkt := ipUDP(c.src, c.dst, 0, 0, nil) // an IP header, then replace the payload
		if c.src.Is4() {
			pkt = append(pkt[:20], tcp...)
			pkt[9] = 6
			binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
		} else {
			pkt = append(pkt[:40], tcp...)
			pkt[6] = 6
			binary.BigEndian.PutUint16(pkt[4:], uint16(len(tcp)))
		}
		src, dst, ok := parseSYN(pkt)
		if !ok || src != c.src || dst != c.dst {
			t.Errorf("parseSYN: %v %v %v", src, dst, ok)
		}
		if !fixTCPChecksum(pkt) {
			t.Fatal("fixTCPChecksum: not TCP")
		}
		// Summing again with the checksum in gives 0xffff.
		_, _, _, l4, _ := parseIP(pkt)
		var sum uint32
		for _, b := range [][]byte{c.src.AsSlice(), c.dst.AsSlice(), l4} {
			for i := 0; i+1 < len(b); i += 2 {
				sum += uint32(binary.BigEndian.Uint16(b[i:]))
			}
		}
		sum += 6 + uint32(len(l4))
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		if sum != 0xffff {
			t.Errorf("%v: checksum does not verify: %#x", c.src, sum)
		}
		l4[13] = 0x12 // SYN-ACK
		if _, _, ok := parseSYN(pkt); ok {
			t.Error("parseSYN took a SYN-ACK")
		}
	}
}
