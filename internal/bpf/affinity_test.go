package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// ---------------------------------------------------------------------------
// ClientIP session affinity with a timeout (bpf/lib/lb.h lb_select,
// xlane_affinity): a client's new flows go to the backend its last new
// flow got while that was within the timeout and the backend still takes
// new flows; otherwise the Maglev slot picks anew (and is remembered).
//
//	client epSrc (xl-ep0) ──┐                        ┌─ b0 epLo:8081
//	                        ├─ VIP :80 (affinity) ───┼─ b1 epPeer:8082
//	client epNoFwd (xl-ep1)─┘                        └─ b2 epOther:8083

// monoNow is bpf_ktime_get_ns's clock (CLOCK_MONOTONIC) in nanoseconds.
func monoNow(tb testing.TB) uint64 {
	tb.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		tb.Fatal(err)
	}
	return uint64(ts.Nano())
}

// dstOf is the destination of a frame the program left.
func dstOf(tb testing.TB, frame []byte) netip.AddrPort {
	tb.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var a netip.Addr
	switch ip := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		a, _ = netip.AddrFromSlice(ip.DstIP.To4())
	case *layers.IPv6:
		a, _ = netip.AddrFromSlice(ip.DstIP)
	default:
		tb.Fatalf("no IP header in %x", frame)
	}
	tcp, ok := pkt.TransportLayer().(*layers.TCP)
	if !ok {
		tb.Fatalf("no TCP header in %x", frame)
	}
	return netip.AddrPortFrom(a, uint16(tcp.DstPort))
}

func TestCTServiceAffinity(t *testing.T) {
	h := newHarness(t)
	h.setNode(t, natPortMin, natPortMax)
	backends := []endpointPort{{epLo, 8081}, {epPeer, 8082}, {epOther, 8083}}
	type client struct {
		ep  endpoint
		dev string
	}
	c1, c2 := client{epSrc, devEP0}, client{epNoFwd, devEP1}
	for _, fam := range []struct {
		name string
		vip  netip.AddrPort
		base uint32
	}{{"ipv4", ap(addr("10.96.2.1"), 80), 30}, {"ipv6", ap(addr("fd00:96::2:1"), 80), 40}} {
		v4 := fam.vip.Addr().Is4()
		src := func(c client) netip.Addr {
			if v4 {
				return c.ep.v4
			}
			return c.ep.v6
		}
		port := uint16(30000)
		// open runs a new flow of c's to vip and returns the backend index it reached.
		open := func(t *testing.T, c client, vip netip.AddrPort) int {
			t.Helper()
			port++
			f := ctFlow{src: ap(src(c), port), dst: vip, nat: CTNatDst}
			ret, in, out := h.ctRun(t, progFromEP, c.dev, f.orig("S").sentBy(c.ep))
			wantVerdict(t, ret, actRedirect, in, out)
			got := dstOf(t, out)
			for i, b := range backends {
				if b.addr(v4) == got {
					return i
				}
			}
			t.Fatalf("flow %v -> %v reached %v, no backend", f.src, vip, got)
			return -1
		}
		entry := func(t *testing.T, id uint32, c client) (AffinityKey, AffinityVal, bool) {
			t.Helper()
			k := AffinityKey{Service: id, Client: src(c).As16()}
			var v AffinityVal
			err := h.objs.Affinity().Lookup(&k, &v)
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return k, v, false
			} else if err != nil {
				t.Fatal(err)
			}
			return k, v, true
		}
		// allTo points every Maglev slot of service id at backend i.
		allTo := func(t *testing.T, id uint32, i uint32) {
			t.Helper()
			slots := make([]uint32, DefaultMaglevSize)
			for j := range slots {
				slots[j] = i
			}
			h.putMaglev(t, id, slots)
		}

		t.Run(fam.name, func(t *testing.T) {
			id := fam.base + 1
			s := testService{id: id, vip: fam.vip, proto: ctTCP, backends: backends, flags: SvcAffinity, timeout: 60}
			h.putService(t, s)
			allTo(t, id, 0)

			t.Run("same client one backend within the timeout", func(t *testing.T) {
				if got := open(t, c1, fam.vip); got != 0 {
					t.Fatalf("first flow reached backend %d, want the table's 0", got)
				}
				_, v, ok := entry(t, id, c1)
				if !ok || v.Index != 0 || netip.AddrFrom16(v.Addr).Unmap() != backends[0].addr(v4).Addr() || v.Port != nbo(8081) {
					t.Fatalf("xlane_affinity after the first flow: %+v (present %v), want backend 0", v, ok)
				}
				// The table now says backend 1 for everyone: c1 stays on 0.
				allTo(t, id, 1)
				for range 5 {
					if got := open(t, c1, fam.vip); got != 0 {
						t.Fatalf("a new flow of the same client within the timeout reached backend %d, want 0", got)
					}
				}
				_, v2, _ := entry(t, id, c1)
				if v2.Last < v.Last {
					t.Errorf("entry's time went back: %d < %d", v2.Last, v.Last)
				}
			})
			t.Run("another client gets the table's choice", func(t *testing.T) {
				if got := open(t, c2, fam.vip); got != 1 {
					t.Fatalf("client 2 reached backend %d, want the table's 1", got)
				}
				if got := open(t, c1, fam.vip); got != 0 {
					t.Fatalf("client 1 reached backend %d after client 2's flow, want still 0", got)
				}
			})
			t.Run("re-chosen after the timeout", func(t *testing.T) {
				k, v, _ := entry(t, id, c1)
				v.Last = monoNow(t) - 61*uint64(time.Second)
				if err := h.objs.Affinity().Put(&k, &v); err != nil {
					t.Fatal(err)
				}
				if got := open(t, c1, fam.vip); got != 1 {
					t.Fatalf("after the timeout the client reached backend %d, want the table's 1", got)
				}
				_, v, _ = entry(t, id, c1)
				if v.Index != 1 || monoNow(t)-v.Last > uint64(10*time.Second) {
					t.Errorf("entry after the re-choice: index %d, %d ns old; want 1, fresh", v.Index, monoNow(t)-v.Last)
				}
				// Just inside the timeout: kept.
				allTo(t, id, 2)
				v.Last = monoNow(t) - 55*uint64(time.Second)
				if err := h.objs.Affinity().Put(&k, &v); err != nil {
					t.Fatal(err)
				}
				if got := open(t, c1, fam.vip); got != 1 {
					t.Fatalf("55 s into a 60 s timeout the client reached backend %d, want 1", got)
				}
			})
			// c1 is on backend 1, the table says 2.
			t.Run("re-chosen when the backend drains", func(t *testing.T) {
				bk := BackendKey{Service: id, Index: 1}
				var bv BackendVal
				if err := h.objs.Backends().Lookup(&bk, &bv); err != nil {
					t.Fatal(err)
				}
				bv.Flags |= BackendDraining
				if err := h.objs.Backends().Put(&bk, &bv); err != nil {
					t.Fatal(err)
				}
				if got := open(t, c1, fam.vip); got != 2 {
					t.Fatalf("with its backend draining the client reached backend %d, want the table's 2", got)
				}
				bv.Flags = 0
				if err := h.objs.Backends().Put(&bk, &bv); err != nil {
					t.Fatal(err)
				}
				allTo(t, id, 1)
				if got := open(t, c1, fam.vip); got != 2 {
					t.Fatalf("the new choice did not stick: backend %d, want 2", got)
				}
			})
			t.Run("re-chosen when another backend takes its index", func(t *testing.T) {
				// The list shrank: index 2 is now backend 0's address.
				bk := BackendKey{Service: id, Index: 2}
				a := backends[0].addr(v4)
				bv := BackendVal{Addr: a.Addr().As16(), Port: nbo(a.Port())}
				if err := h.objs.Backends().Put(&bk, &bv); err != nil {
					t.Fatal(err)
				}
				if got := open(t, c1, fam.vip); got != 1 {
					t.Fatalf("with index 2 another backend's, the client reached backend %d, want the table's 1", got)
				}
				h.putService(t, s) // index 2 back to backend 2
				allTo(t, id, 0)
			})
			t.Run("re-chosen when the backend goes", func(t *testing.T) {
				// c1 is on backend 1; its entry gone from xlane_backends.
				bk := BackendKey{Service: id, Index: 1}
				if err := h.objs.Backends().Delete(&bk); err != nil {
					t.Fatal(err)
				}
				if got := open(t, c1, fam.vip); got != 0 {
					t.Fatalf("with its backend removed the client reached backend %d, want the table's 0", got)
				}
				h.putService(t, s)
				allTo(t, id, 0)
			})
			t.Run("no timeout: no state", func(t *testing.T) {
				id := fam.base + 2
				vip := ap(fam.vip.Addr(), 81)
				h.putService(t, testService{id: id, vip: vip, proto: ctTCP, backends: backends, flags: SvcAffinity})
				allTo(t, id, 2)
				if got := open(t, c1, vip); got != 2 {
					t.Fatalf("reached backend %d, want the table's 2", got)
				}
				if _, v, ok := entry(t, id, c1); ok {
					t.Fatalf("affinity_timeout 0 wrote an entry: %+v", v)
				}
			})
			t.Run("no affinity: no state", func(t *testing.T) {
				id := fam.base + 3
				vip := ap(fam.vip.Addr(), 82)
				h.putService(t, testService{id: id, vip: vip, proto: ctTCP, backends: backends, timeout: 60})
				hits := map[int]int{}
				for range 24 {
					hits[open(t, c1, vip)]++
				}
				if len(hits) != len(backends) {
					t.Errorf("24 flows without affinity reached backends %v, want all %d", hits, len(backends))
				}
				if _, v, ok := entry(t, id, c1); ok {
					t.Fatalf("a service without affinity wrote an entry: %+v", v)
				}
			})
		})
	}
	if t.Failed() {
		var k AffinityKey
		var v AffinityVal
		it := h.objs.Affinity().Iterate()
		for it.Next(&k, &v) {
			t.Logf("xlane_affinity: %s", fmt.Sprintf("%d %v -> %d %v", k.Service, netip.AddrFrom16(k.Client), v.Index, v))
		}
	}
}
