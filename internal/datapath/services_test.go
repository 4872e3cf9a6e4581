package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

func testServices(n, backends, port int) []model.Service {
	svcs := make([]model.Service, n)
	for i := range svcs {
		svcs[i] = model.Service{ID: uint32(i + 1), Proto: "tcp",
			VIP: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)}), 80)}
		for j := 0; j < backends; j++ {
			svcs[i].Backends = append(svcs[i].Backends, model.Backend{Weight: 1,
				Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 80, 0, byte(j + 2)}), uint16(port))})
		}
	}
	return svcs
}

// checkService reads service s back from the maps: its table's size and
// that every slot names one of its backends, each backend entry present.
func checkService(t *testing.T, d *BPF, s model.Service) {
	t.Helper()
	var v bpf.ServiceVal
	k := serviceKey(&s)
	if err := d.objs.Services().Lookup(&k, &v); err != nil || v.Id != s.ID {
		t.Fatalf("service %d: %+v, %v", s.ID, v, err)
	}
	if want := d.maglevSizeFor(len(s.Backends)); v.MaglevSize < want || v.MaglevSize > 4*want {
		t.Errorf("service %d: table size %d, want %d (up to 4 times as large, kept from before)", s.ID, v.MaglevSize, want)
	}
	inner, err := d.maglevTable(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	if inner.MaxEntries() != v.MaglevSize {
		t.Errorf("service %d: table of %d slots, service says %d", s.ID, inner.MaxEntries(), v.MaglevSize)
	}
	seen := map[uint32]bool{}
	var slot, idx uint32
	it := inner.Iterate()
	for it.Next(&slot, &idx) {
		if int(idx) >= len(s.Backends) {
			t.Fatalf("service %d: slot %d names backend %d of %d", s.ID, slot, idx, len(s.Backends))
		}
		seen[idx] = true
	}
	if len(seen) != len(s.Backends) {
		t.Errorf("service %d: slots name %d backends, want %d", s.ID, len(seen), len(s.Backends))
	}
	for j := 0; j < len(s.Backends)+2; j++ {
		var bv bpf.BackendVal
		err := d.objs.Backends().Lookup(&bpf.BackendKey{Service: s.ID, Index: uint32(j)}, &bv)
		if (err == nil) != (j < len(s.Backends)) {
			t.Errorf("service %d backend %d: %v (of %d)", s.ID, j, err, len(s.Backends))
		}
	}
}

// TestPutServices: a batch of services, then a backend change in place,
// then tables that grow and shrink, then deletion; read back each time.
func TestPutServices(t *testing.T) {
	d := openTest(t, "svcs")
	// More than one chunk. -short (the kernel matrix's guests, where each
	// chunk's RCU wait is slow): just over one chunk.
	chunk, n := putChunkFor(), 5000
	if testing.Short() || n <= chunk {
		n = chunk + 200
	}
	svcs := testServices(n, 3, 8080)
	start := time.Now()
	if err := d.PutServices(svcs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d services in %v (chunks of %d)", len(svcs), time.Since(start), chunk)
	for _, i := range []int{0, n / 2, chunk - 1, chunk, n - 1} {
		checkService(t, d, svcs[i])
	}
	mem, err := d.ServicesMemory()
	if err != nil {
		t.Fatal(err)
	}
	per, _ := tableMemlock(307)
	// Before 6.4 the kernel's memlock of a hash map is computed from its
	// size, not its entries: Maps equals Fixed there.
	if mem.Services != n || mem.Tables != uint64(n)*per || mem.Fixed == 0 || mem.Maps < mem.Fixed || mem.PerService() < per || mem.PerService() > per+1024 {
		t.Errorf("memory of %d services of 3 backends: %+v, %d per service; want %d tables of %d bytes and a little more per service", n, mem, mem.PerService(), n, per)
	}
	t.Logf("memory: %+v, %d B per service (table %d B)", mem, mem.PerService(), per)
	tableOf := func(id uint32) ebpf.MapID {
		var inner ebpf.MapID
		if err := d.objs.Maglev().Lookup(id, &inner); err != nil {
			t.Fatal(err)
		}
		return inner
	}
	// One backend fewer: same size, the table rewritten in place.
	before := tableOf(1)
	one := svcs[0]
	one.Backends = one.Backends[:2]
	start = time.Now()
	if err := d.PutService(one); err != nil {
		t.Fatal(err)
	}
	t.Logf("backend change in %v", time.Since(start))
	checkService(t, d, one)
	if tableOf(1) != before {
		t.Errorf("same-size update swapped the table")
	}
	// Grow to 40 backends (4093 slots), then shrink to 1.
	for _, n := range []int{40, 1} {
		s := testServices(1, n, 9090)[0]
		if err := d.PutService(s); err != nil {
			t.Fatal(err)
		}
		checkService(t, d, s)
	}
	// Deleting services of which some are gone: no batch per missing one.
	start = time.Now()
	if err := d.DeleteServices(append([]model.Service{svcs[5]}, svcs[4:200]...)); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted 195 services, 1 missing, in %v", time.Since(start))
	checkService(t, d, svcs[200])
	checkService(t, d, svcs[n-1])
	// Deletion leaves none of it.
	start = time.Now()
	if err := d.DeleteServices(svcs); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted %d services in %v", len(svcs), time.Since(start))
	for name, m := range map[string]*ebpf.Map{"services": d.objs.Services(), "maglev": d.objs.Maglev(), "backends": d.objs.Backends()} {
		var k, v []byte
		if it := m.Iterate(); it.Next(&k, &v) {
			t.Errorf("%s not empty after deleting every service", name)
		}
	}
}

func TestMaglevSizeFor(t *testing.T) {
	d := &BPF{}
	for n, want := range map[int]uint32{0: 251, 1: 251, 2: 251, 3: 307, 10: 1009, 163: 16301, 655: 65519, 656: 65521, 5000: 65521} {
		if got := d.maglevSizeFor(n); got != want {
			t.Errorf("maglevSizeFor(%d) = %d, want %d", n, got, want)
		}
	}
	if got := (&BPF{maglevSize: 1021}).maglevSizeFor(3); got != 1021 {
		t.Errorf("fixed size: %d, want 1021", got)
	}
}

// TestPutServiceForgetsUnanswered: a SYN sent to a VIP before its service
// was programmed left an untranslated flow (CT_NEW, no NAT); programming
// the service deletes it (both entries), so that a client reusing the
// port gets a backend instead of 60 s of unanswered SYNs (bench k8s's
// connect timeout after xlaned's start). An answered flow to the address
// and flows to other addresses stay; a reprogrammed service scans nothing.
func TestPutServiceForgetsUnanswered(t *testing.T) {
	d := openTest(t, "unanswered")
	defer d.FlushCT()
	client := netip.MustParseAddr("10.9.0.2")
	vip := netip.MustParseAddrPort("10.96.0.9:80")
	other := netip.MustParseAddrPort("10.96.0.10:80")
	now := d.now() + uint64(60*time.Second)
	put := func(sport uint16, dst netip.AddrPort, st bpf.CTState) {
		ok := bpf.CTKey{Proto: unix.IPPROTO_TCP, Saddr: client.As16(), Daddr: dst.Addr().As16(), Sport: htons(sport), Dport: htons(dst.Port())}
		rk := bpf.CTKey{Proto: unix.IPPROTO_TCP, Saddr: ok.Daddr, Daddr: ok.Saddr, Sport: ok.Dport, Dport: ok.Sport}
		ov := bpf.CTVal{Expires: now, State: uint8(st), Dir: uint8(bpf.CTDirOrig)}
		rv := bpf.CTVal{Expires: now, State: uint8(st), Dir: uint8(bpf.CTDirReply)}
		for _, e := range []struct {
			k *bpf.CTKey
			v *bpf.CTVal
		}{{&ok, &ov}, {&rk, &rv}} {
			if err := d.objs.CT().Update(e.k, e.v, ebpf.UpdateAny); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(40001, vip, bpf.CTNew)                                // SYN before the service: forgotten
	put(40002, vip, bpf.CTEstablished)                        // answered: kept
	put(40003, other, bpf.CTNew)                              // another address: kept
	put(40004, netip.AddrPortFrom(vip.Addr(), 81), bpf.CTNew) // another port: kept
	svc := model.Service{ID: 7, VIP: vip, Proto: "tcp", Backends: []model.Backend{{Addr: netip.MustParseAddrPort("10.9.0.3:8080"), Weight: 1}}}
	if err := d.PutService(svc); err != nil {
		t.Fatal(err)
	}
	left := func() map[uint16]int {
		flows, err := d.Flows(0)
		if err != nil {
			t.Fatal(err)
		}
		ports := map[uint16]int{}
		for _, f := range flows {
			p := f.Src.Port()
			if f.Reply {
				p = f.Dst.Port()
			}
			ports[p]++
		}
		return ports
	}
	if got := left(); len(got) != 3 || got[40001] != 0 || got[40002] != 2 || got[40003] != 2 || got[40004] != 2 {
		t.Fatalf("entries per client port after PutService: %v, want 40002, 40003, 40004 with 2 each (40001's unanswered flow to the new VIP gone)", got)
	}
	// Reprogrammed (same table): an unanswered flow made meanwhile is
	// not looked for (the service was there when it was made).
	put(40005, vip, bpf.CTNew)
	svc.Backends = append(svc.Backends, model.Backend{Addr: netip.MustParseAddrPort("10.9.0.4:8080"), Weight: 1})
	if err := d.PutService(svc); err != nil {
		t.Fatal(err)
	}
	if got := left(); got[40005] != 2 {
		t.Fatalf("entries per client port after reprogramming: %v, want 40005's 2 kept (no scan for a known service)", got)
	}
}
