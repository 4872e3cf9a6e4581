package bpf

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
)

// Service load balancing (lib/lb.h: the DNAT of the conntrack stage), on
// the conntrack harness of ct_test.go.

// ---------------------------------------------------------------------------
// Services: a VIP's first packet picks a backend through the service's
// Maglev table; conntrack keeps the flow there.

// lbHash is bpf/lib/lb.h's lb_hash over a ct key, as the program computes
// it on a little-endian machine.
func lbHash(k CTKey, flags uint32) uint32 {
	mix := func(h, k uint32) uint32 {
		k *= 0xcc9e2d51
		k = bits.RotateLeft32(k, 15)
		k *= 0x1b873593
		h ^= k
		h = bits.RotateLeft32(h, 13)
		return h*5 + 0xe6546b64
	}
	w := func(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }
	h := uint32(0x7a1e)
	for i := 0; i < 16; i += 4 {
		h = mix(h, w(k.Saddr[i:]))
	}
	if flags&SvcAffinity == 0 {
		h = mix(h, w(k.Daddr[12:]))
		h = mix(h, uint32(k.Sport)<<16|uint32(k.Dport))
		h = mix(h, uint32(k.Proto))
	}
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	return h ^ h>>16
}

// testService is a service as the daemon programs it (datapath/services.go):
// backends under (id, index), a Maglev slot array in xlane_maglev, then
// the VIP in xlane_services.
type testService struct {
	id       uint32
	vip      netip.AddrPort
	proto    layers.IPProtocol
	flags    uint32
	timeout  uint32 // affinity_timeout (seconds), with SvcAffinity
	backends []endpointPort
	slots    []uint32 // backend index per slot; nil: slot i -> i % len(backends)
	size     uint32   // table size when slots is nil (0: DefaultMaglevSize)
}

type endpointPort struct {
	ep   endpoint
	port uint16
}

func (b endpointPort) addr(v4 bool) netip.AddrPort {
	if v4 {
		return ap(b.ep.v4, b.port)
	}
	return ap(b.ep.v6, b.port)
}

func (h *harness) putService(tb testing.TB, s testService) []uint32 {
	tb.Helper()
	size := uint32(DefaultMaglevSize)
	if s.size != 0 {
		size = s.size
	}
	v4 := s.vip.Addr().Is4()
	for i, b := range s.backends {
		k := BackendKey{Service: s.id, Index: uint32(i)}
		a := b.addr(v4)
		v := BackendVal{Addr: a.Addr().As16(), Port: nbo(a.Port())}
		if err := h.objs.Backends().Put(&k, &v); err != nil {
			tb.Fatal(err)
		}
	}
	slots := s.slots
	if slots == nil {
		slots = make([]uint32, size)
		for i := range slots {
			if len(s.backends) == 0 {
				slots[i] = ^uint32(0)
			} else {
				slots[i] = uint32(i % len(s.backends))
			}
		}
	}
	h.putMaglev(tb, s.id, slots)
	k := ServiceKey{Addr: s.vip.Addr().As16(), Port: nbo(s.vip.Port()), Proto: uint8(s.proto)}
	v := ServiceVal{Id: s.id, MaglevSize: uint32(len(slots)), Flags: s.flags, AffinityTimeout: s.timeout}
	if err := h.objs.Services().Put(&k, &v); err != nil {
		tb.Fatal(err)
	}
	return slots
}

// putMaglev installs (or swaps whole) service id's slot array.
func (h *harness) putMaglev(tb testing.TB, id uint32, slots []uint32) {
	tb.Helper()
	inner, err := ebpf.NewMap(MaglevInnerSpec(uint32(len(slots))))
	if err != nil {
		tb.Fatal(err)
	}
	defer inner.Close()
	keys := make([]uint32, len(slots))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, slots, nil); err != nil {
		tb.Fatal(err)
	}
	if err := h.objs.Maglev().Put(id, inner); err != nil {
		tb.Fatal(err)
	}
}

func TestCTService(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	backends := []endpointPort{{epNoFwd, 8080}, {epLo, 8081}, {epPeer, 8082}}
	svcs := []testService{
		{id: 11, vip: ap(addr("10.96.0.10"), 80), proto: ctTCP, backends: backends},
		// Tables of other sizes than the template's (BPF_F_INNER_MAP):
		// the daemon sizes each for its backends.
		{id: 12, vip: ap(addr("10.96.0.10"), 53), proto: ctUDP, backends: backends, size: 65521},
		{id: 13, vip: ap(addr("fd00:96::10"), 80), proto: ctTCP, backends: backends, size: 251},
		{id: 14, vip: ap(addr("10.96.0.11"), 80), proto: ctTCP, backends: backends, flags: SvcAffinity},
	}
	for _, s := range svcs {
		slots := h.putService(t, s)
		v4 := s.vip.Addr().Is4()
		src := epSrc.v6
		if v4 {
			src = epSrc.v4
		}
		name := fmt.Sprintf("%v/%v", s.vip, s.proto)
		if s.flags&SvcAffinity != 0 {
			name += "/affinity"
		}
		t.Run(name, func(t *testing.T) {
			hits := map[int]int{}
			var replied bool
			for i := range 48 {
				// Client ports differ between services: a flow to another VIP
				// from the same port that lands on the same backend would
				// clash (TestCTServiceReplyClash).
				f := ctFlow{proto: s.proto, src: ap(src, uint16(20000+1000*int(s.id)+i*7)), dst: s.vip, nat: CTNatDst}
				idx := int(slots[lbHash(f.origKey(), s.flags)%uint32(len(slots))])
				b := backends[idx]
				f.to = b.addr(v4)
				hits[idx]++
				p := f.orig("S").sentBy(epSrc)
				ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
				wantVerdict(t, ret, actRedirect, in, out)
				wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(b.ep.mac, b.ep.hostMAC))
				h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdPeer, DirEgress}, ctMetric{h.ifindexOf(b.ep), fwdPeer, DirIngress})
				first := toTCPSyn
				if s.proto == ctUDP {
					first = toUDP
				}
				h.checkFlow(t, f, ctStNew, first)
				if t.Failed() {
					t.Fatalf("flow %v -> %v: slot %d, backend %d (%v)", f.src, f.dst, lbHash(f.origKey(), s.flags)%DefaultMaglevSize, idx, f.to)
				}
				if idx == 0 && !replied && s.proto == ctTCP {
					// The backend's answer leaves as the VIP's.
					replied = true
					rp := f.reply("SA").sentBy(epNoFwd)
					ret, in, out := h.ctRun(t, progFromEP, devEP1, rp)
					wantVerdict(t, ret, actRedirect, in, out)
					wantFrame(t, out, rp.translated(CTNatSrc, s.vip).routedTo(epSrc.mac, epSrc.hostMAC))
					h.checkFlow(t, f, ctStEst, toTCPEst)
				}
			}
			if s.flags&SvcAffinity != 0 {
				if len(hits) != 1 {
					t.Errorf("ClientIP affinity: one client reached backends %v, want one", hits)
				}
			} else if len(hits) != len(backends) {
				t.Errorf("48 flows reached backends %v, want all %d", hits, len(backends))
			}
		})
	}

	t.Run("flows keep their backend when the table changes", func(t *testing.T) {
		s := svcs[0]
		type held struct {
			f  ctFlow
			be endpointPort
		}
		var flows []held
		moved := 0
		slots := slotsOf(t, h, s.id)
		for i := range 12 {
			f := ctFlow{src: ap(epSrc.v4, uint16(43000+i)), dst: s.vip, nat: CTNatDst}
			be := backends[slots[lbHash(f.origKey(), 0)%DefaultMaglevSize]]
			f.to = be.addr(true)
			p := f.orig("S").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(be.ep.mac, be.ep.hostMAC))
			flows = append(flows, held{f, be})
			if be.port != 8082 {
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("every flow is on backend 2 already: the test shows nothing")
		}
		// Every slot to backend 2 now (the daemon swaps tables whole).
		all2 := make([]uint32, DefaultMaglevSize)
		for i := range all2 {
			all2[i] = 2
		}
		h.putMaglev(t, s.id, all2)
		for _, fl := range flows {
			p := fl.f.orig("A").sentBy(epSrc)
			ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, p.translated(CTNatDst, fl.f.to).routedTo(fl.be.ep.mac, fl.be.ep.hostMAC))
		}
		f := ctFlow{src: ap(epSrc.v4, 43999), dst: s.vip, nat: CTNatDst, to: backends[2].addr(true)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.translated(CTNatDst, f.to).routedTo(epPeer.mac, epPeer.hostMAC))
	})
}

// slotsOf reads service id's slot array back from xlane_maglev.
func slotsOf(tb testing.TB, h *harness, id uint32) []uint32 {
	tb.Helper()
	var innerID ebpf.MapID
	if err := h.objs.Maglev().Lookup(id, &innerID); err != nil {
		tb.Fatalf("xlane_maglev[%d]: %v", id, err)
	}
	inner, err := ebpf.NewMapFromID(innerID)
	if err != nil {
		tb.Fatal(err)
	}
	defer inner.Close()
	out := make([]uint32, DefaultMaglevSize)
	for i := range out {
		if err := inner.Lookup(uint32(i), &out[i]); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// TestCTServiceReplyClash is in ct_both_test.go (source-port remap).

func TestCTServiceNoBackend(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	h.putService(t, testService{id: 21, vip: ap(addr("10.96.1.1"), 80), proto: ctTCP})
	h.putService(t, testService{id: 22, vip: ap(addr("fd00:96::1:1"), 80), proto: ctTCP})
	// A backend index with no backend entry behind it.
	h.putService(t, testService{id: 23, vip: ap(addr("10.96.1.3"), 80), proto: ctTCP, slots: make([]uint32, DefaultMaglevSize)})
	// A service whose table is missing altogether.
	k := ServiceKey{Addr: addr("10.96.1.4").As16(), Port: nbo(80), Proto: uint8(ctTCP)}
	if err := h.objs.Services().Put(&k, &ServiceVal{Id: 24, MaglevSize: DefaultMaglevSize}); err != nil {
		t.Fatal(err)
	}
	for _, vip := range []netip.AddrPort{
		ap(addr("10.96.1.1"), 80), ap(addr("fd00:96::1:1"), 80), ap(addr("10.96.1.3"), 80), ap(addr("10.96.1.4"), 80),
	} {
		t.Run(vip.String(), func(t *testing.T) {
			for _, from := range []string{"container", "outside"} {
				p, prog, dev, dir := firstToVIP(ctTCP, vip, from)
				before := len(h.ctEntries(t))
				ret, in, out := h.ctRun(t, prog, dev, p)
				wantVerdict(t, ret, actShot, in, out)
				h.wantMetrics(t, len(in), ctMetric{h.links[dev], dropNoBackend, dir})
				if n := len(h.ctEntries(t)); n != before {
					t.Errorf("%s: %d conntrack entries, was %d", from, n, before)
				}
			}
		})
	}
	t.Run("another port of the VIP is no service", func(t *testing.T) {
		f := ctFlow{src: ap(epSrc.v4, 40000), dst: ap(addr("10.96.1.1"), 81)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actPass, in, out) // no route to 10.96/16 here
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], passNotFwded, DirEgress})
	})
}
