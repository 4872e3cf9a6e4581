package bpf_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// The firewall on service flows: Kubernetes judges policy on the packets
// as the pods see them, a service flow's original direction on its
// backend (after the DNAT) and its reply as the reply of the client's
// flow (after the reverse translation). Endpoints are fwtest's (all on
// loopback, the device of context-less runs): b1 is the client, the
// services' backends are b2 and r1.
//
//	b1 --SYN--> VIP:80 ==[from_endpoint: DNAT]==> b2:8080 (or r1:8080)
//	b1 <--SYN-ACK from VIP:80 <==[from_endpoint: reverse]== b2:8080

// putFwService makes vip (TCP or UDP) a service with backend be alone.
func (h *fwHarness) putFwService(tb testing.TB, id uint32, proto uint8, vip, be netip.AddrPort) {
	tb.Helper()
	bk := bpf.BackendKey{Service: id}
	if err := h.objs.Backends().Put(&bk, &bpf.BackendVal{Addr: be.Addr().As16(), Port: htons(be.Port())}); err != nil {
		tb.Fatal(err)
	}
	inner, err := ebpf.NewMap(bpf.MaglevInnerSpec(1))
	if err != nil {
		tb.Fatal(err)
	}
	defer inner.Close()
	if err := inner.Put(uint32(0), uint32(0)); err != nil {
		tb.Fatal(err)
	}
	if err := h.objs.Maglev().Put(id, inner); err != nil {
		tb.Fatal(err)
	}
	sk := bpf.ServiceKey{Addr: vip.Addr().As16(), Port: htons(vip.Port()), Proto: proto}
	if err := h.objs.Services().Put(&sk, &bpf.ServiceVal{Id: id, MaglevSize: 1}); err != nil {
		tb.Fatal(err)
	}
}

// runRet runs pk through the program of its kind and returns the verdict.
func (h *fwHarness) runRet(tb testing.TB, pk firewall.Packet) uint32 {
	tb.Helper()
	frame, err := fwtest.Frame(pk)
	if err != nil {
		tb.Fatal(err)
	}
	prog := h.objs.FromEndpoint()
	if pk.Kind == firewall.KindToEP {
		prog = h.objs.ToEndpoint()
	}
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := bpf.RunVerdict(h.do, prog, h.objs.Metrics(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	return ret
}

// ctHas says whether xlane_ct holds k.
func (h *fwHarness) ctHas(tb testing.TB, k bpf.CTKey) bool {
	tb.Helper()
	v, err := h.objs.CT().LookupBytes(k)
	if err != nil {
		tb.Fatal(err)
	}
	return v != nil
}

func fwCTKey(proto uint8, src, dst netip.AddrPort) bpf.CTKey {
	return bpf.CTKey{Saddr: src.Addr().As16(), Daddr: dst.Addr().As16(),
		Sport: htons(src.Port()), Dport: htons(dst.Port()), Proto: proto}
}

type fwSvcCase struct {
	name       string
	proto      uint8
	client     netip.Addr // b1's
	vip, allow netip.AddrPort
	deny       netip.AddrPort // a backend the egress rule refuses
}

func fwSvcCases() []fwSvcCase {
	a := netip.MustParseAddr
	ap := netip.AddrPortFrom
	var cs []fwSvcCase
	for _, proto := range []uint8{6, 17} {
		cs = append(cs,
			fwSvcCase{fmt.Sprintf("ipv4/%d", proto), proto, a("10.1.0.2"), ap(a("10.96.0.10"), 80),
				ap(a("10.2.0.2"), 8080), ap(a("10.1.0.3"), 8080)},
			fwSvcCase{fmt.Sprintf("ipv6/%d", proto), proto, a("fd00:1::2"), ap(a("fd00:96::10"), 80),
				ap(a("fd00:2::2"), 8080), ap(a("fd00:1::3"), 8080)})
	}
	return cs
}

// TestFirewallServiceReplyEstablished: b1, isolated for ingress (a drop
// rule on its address, established on: what NetworkPolicy relies on),
// opens a flow to a service whose backend is on the node. The backend's
// answer, translated back to come from the VIP, is the reply of b1's flow:
// allowed, on the from-endpoint path (same node: the peer redirect runs
// b1's to-endpoint rules) and on tcx egress (what Linux delivers: a reply
// from another node's backend, translated by the overlay's program).
func TestFirewallServiceReplyEstablished(t *testing.T) {
	h := newFwHarness(t)
	est := true
	h.install(t, &firewall.RuleSet{Established: &est, Rules: []firewall.Rule{
		{Name: "b1-isolated", Action: "drop", Direction: "to-endpoint", Scope: "endpoint:b1"},
	}}, false)
	for i, c := range fwSvcCases() {
		t.Run(c.name, func(t *testing.T) {
			id := uint32(100 + i)
			h.putFwService(t, id, c.proto, c.vip, c.deny) // b2: b1's network
			be := c.deny
			cl := netip.AddrPortFrom(c.client, uint16(41000+i))
			pk := func(k firewall.Kind, src, dst netip.AddrPort, flags uint8) firewall.Packet {
				return firewall.Packet{Kind: k, Src: src.Addr(), Dst: dst.Addr(), Proto: c.proto,
					SPort: uint32(src.Port()), DPort: uint32(dst.Port()), Flags: flags}
			}
			if ret := h.runRet(t, pk(firewall.KindFromEP, cl, c.vip, 0x02)); ret == tcShot {
				t.Fatalf("b1's first packet to the VIP refused")
			}
			if !h.ctHas(t, fwCTKey(c.proto, cl, c.vip)) {
				t.Fatalf("no conntrack entry for b1 -> VIP")
			}
			// The translated reply, as Linux hands it to b1 (tcx egress).
			if ret := h.runRet(t, pk(firewall.KindToEP, c.vip, cl, 0x12)); ret == tcShot {
				t.Errorf("tcx egress: the reply from the VIP refused by b1's ingress rule")
			}
			// The backend's answer, translated on the from-endpoint path.
			if ret := h.runRet(t, pk(firewall.KindFromEP, be, cl, 0x12)); ret == tcShot {
				t.Errorf("from the backend: the reply refused by b1's ingress rule")
			}
			// Not a hole: a new flow from the VIP's address to b1 is refused.
			if ret := h.runRet(t, pk(firewall.KindToEP, c.vip, netip.AddrPortFrom(c.client, 9), 0x02)); ret != tcShot {
				t.Errorf("a new flow from the VIP's address to b1: return %d, want refused", ret)
			}
			h.objs.Services().Delete(&bpf.ServiceKey{Addr: c.vip.Addr().As16(), Port: htons(c.vip.Port()), Proto: c.proto})
		})
	}
}

// TestFirewallServiceEgressOnBackend: b1's egress is allowed to 0.0.0.0/4
// (fd00::/8) except b2: a flow to a VIP in the allowed range is refused
// when its backend is b2 (and keeps no conntrack entry), allowed when it
// is r1; a rule allowing only the backend lets the VIP's flow through.
func TestFirewallServiceEgressOnBackend(t *testing.T) {
	h := newFwHarness(t)
	est := true
	defaults := []firewall.Default{{Scope: "endpoint:b1", Direction: "from-endpoint", Action: "drop"}}
	except := &firewall.RuleSet{Established: &est, Defaults: defaults, Rules: []firewall.Rule{
		{Name: "except-b2", Action: "drop", Direction: "from-endpoint", Scope: "endpoint:b1", Dst: firewall.List{"10.1.0.3/32", "fd00:1::3/128"}},
		{Name: "cidr", Action: "allow", Direction: "from-endpoint", Scope: "endpoint:b1", Dst: firewall.List{"0.0.0.0/4", "fd00::/8"}},
	}}
	onlyR1 := &firewall.RuleSet{Established: &est, Defaults: defaults, Rules: []firewall.Rule{
		{Name: "r1", Action: "allow", Direction: "from-endpoint", Scope: "endpoint:b1", Dst: firewall.List{"10.2.0.2/32", "fd00:2::2/128"}},
	}}
	for i, c := range fwSvcCases() {
		t.Run(c.name, func(t *testing.T) {
			pk := func(src, dst netip.AddrPort, flags uint8) firewall.Packet {
				return firewall.Packet{Kind: firewall.KindFromEP, Src: src.Addr(), Dst: dst.Addr(), Proto: c.proto,
					SPort: uint32(src.Port()), DPort: uint32(dst.Port()), Flags: flags}
			}
			for j, s := range []struct {
				rs      *firewall.RuleSet
				be      netip.AddrPort
				refused bool
			}{
				{except, c.deny, true},
				{except, c.allow, false},
				{onlyR1, c.allow, false},
				{onlyR1, c.deny, true},
			} {
				h.install(t, s.rs, false)
				id := uint32(200 + 10*i + j)
				h.putFwService(t, id, c.proto, c.vip, s.be)
				cl := netip.AddrPortFrom(c.client, uint16(42000+10*i+j))
				if ret := h.runRet(t, pk(cl, s.be, 0x02)); (ret == tcShot) != s.refused {
					t.Errorf("step %d: direct to %v: return %d, want refused %v", j, s.be, ret, s.refused)
				}
				cl = netip.AddrPortFrom(cl.Addr(), cl.Port()+1000)
				ret := h.runRet(t, pk(cl, c.vip, 0x02))
				if (ret == tcShot) != s.refused {
					t.Errorf("step %d: through the VIP to %v: return %d, want refused %v", j, s.be, ret, s.refused)
				}
				has := h.ctHas(t, fwCTKey(c.proto, cl, c.vip))
				if s.refused && has {
					t.Errorf("step %d: a refused flow through the VIP kept its conntrack entry", j)
				}
				if !s.refused {
					if !has {
						t.Fatalf("step %d: no conntrack entry for an allowed flow", j)
					}
					// The backend answers; b1's next packets are established.
					if ret := h.runRet(t, pk(s.be, cl, 0x12)); ret == tcShot {
						t.Errorf("step %d: the backend's answer refused", j)
					}
					if ret := h.runRet(t, pk(cl, c.vip, 0x10)); ret == tcShot {
						t.Errorf("step %d: b1's ACK refused", j)
					}
				}
			}
		})
	}
}
