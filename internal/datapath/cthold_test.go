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

// TestCTHoldSharedBackends: the GC keeps closed flows to a backend two
// services share until the backend's TIME_WAIT is over, and collects the
// rest as before.
func TestCTHoldSharedBackends(t *testing.T) {
	d := openTest(t, "cthold")
	const s = uint64(time.Second)
	now := uint64(1000) * s
	d.clock = func() uint64 { return now }
	shared := netip.MustParseAddrPort("10.9.0.10:8080")
	alone := netip.MustParseAddrPort("10.9.0.11:8080")
	for i, bs := range [][]netip.AddrPort{{shared}, {shared, alone}} {
		svc := model.Service{ID: uint32(i + 1), VIP: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, 0, byte(i + 1)}), 80), Proto: "tcp"}
		for _, b := range bs {
			svc.Backends = append(svc.Backends, model.Backend{Addr: b, Weight: 1})
		}
		if err := d.PutService(svc); err != nil {
			t.Fatal(err)
		}
	}
	client := netip.MustParseAddr("10.9.0.2")
	// A flow's two entries, client port sport to backend b, state st,
	// deadline ago seconds in the past.
	put := func(sport uint16, b netip.AddrPort, st bpf.CTState, ago uint64) {
		ok := bpf.CTKey{Proto: unix.IPPROTO_TCP, Saddr: client.As16(), Daddr: netip.MustParseAddr("10.96.0.1").As16(), Sport: htons(sport), Dport: htons(80)}
		ov := bpf.CTVal{Expires: now - ago*s, State: uint8(st), Dir: uint8(bpf.CTDirOrig), Nat: uint8(bpf.CTNatDst), NatAddr: b.Addr().As16(), NatPort: htons(b.Port())}
		rk := bpf.CTKey{Proto: unix.IPPROTO_TCP, Saddr: b.Addr().As16(), Daddr: client.As16(), Sport: htons(b.Port()), Dport: htons(sport)}
		rv := bpf.CTVal{Expires: now - ago*s, State: uint8(st), Dir: uint8(bpf.CTDirReply), Nat: uint8(bpf.CTNatSrc), NatAddr: ok.Daddr, NatPort: htons(80)}
		for _, e := range []struct {
			k *bpf.CTKey
			v *bpf.CTVal
		}{{&ok, &ov}, {&rk, &rv}} {
			if err := d.objs.CT().Update(e.k, e.v, ebpf.UpdateAny); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(1, shared, bpf.CTClosed, 20)      // closed, shared: held
	put(2, alone, bpf.CTClosed, 20)       // closed, one service: collected
	put(3, shared, bpf.CTEstablished, 20) // idle established: collected
	put(4, shared, bpf.CTClosed, 60)      // closed past the hold: collected
	if n, err := d.GCCT(10*s, nil); err != nil || n != 6 {
		t.Fatalf("GC collected %d entries (%v), want 6", n, err)
	}
	flows, err := d.Flows(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 2 || flows[0].Src.Port() != 1 && flows[0].Dst.Port() != 1 {
		t.Errorf("left after GC: %+v, want the closed flow to the shared backend (both entries)", flows)
	}
	// Once the second service is gone the backend is no longer shared.
	if err := d.DeleteService(model.Service{ID: 2, VIP: netip.MustParseAddrPort("10.96.0.2:80"), Proto: "tcp"}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.GCCT(10*s, nil); err != nil || n != 2 {
		t.Fatalf("GC collected %d entries (%v), want 2", n, err)
	}
	d.FlushCT()
}
