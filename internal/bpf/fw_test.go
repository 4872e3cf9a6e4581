package bpf_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/vishvananda/netns"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// Firewall tests: the classifier of bpf/lib/fw.h run with
// BPF_PROG_TEST_RUN through the programs that call it, against the
// reference model of internal/firewall.
//
//	from-endpoint: xlane_from_endpoint (tcx ingress of a host veth)
//	to-endpoint:   xlane_to_endpoint   (tcx egress of a host veth)
//	uplink:        xlane_xdp_from_uplink
//
// Runs happen in a private network namespace where every endpoint of
// fwtest's node is registered on loopback, the device of context-less
// runs; no route leaves it, so allowed packets end as a pass to Linux.

const (
	tcShot  = 2 // TC_ACT_SHOT
	xdpDrop = 1 // XDP_DROP
)

type fwHarness struct {
	objs     *bpf.Objects
	ns, host netns.NsHandle
	in       *firewall.Installer
	events   *ringbuf.Reader
}

func newFwHarness(tb testing.TB) *fwHarness {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root for BPF_PROG_TEST_RUN and network namespaces")
	}
	objs, err := bpf.Load("")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { objs.Close() })
	if objs.XDPErr() != nil {
		tb.Fatalf("XDP programs did not load: %v", objs.XDPErr())
	}
	h := &fwHarness{objs: objs}
	runtime.LockOSThread()
	h.host, err = netns.Get()
	if err == nil {
		h.ns, err = netns.New()
		if serr := netns.Set(h.host); serr != nil {
			tb.Fatalf("back to host netns: %v", serr) // thread stays locked, dies
		}
	}
	runtime.UnlockOSThread()
	if err != nil {
		tb.Fatalf("netns: %v", err)
	}
	tb.Cleanup(func() { h.ns.Close(); h.host.Close() })
	for id, ep := range fwtest.Endpoints {
		mac, _ := net.ParseMAC("02:00:00:0a:00:01")
		val := bpf.NewEndpointVal(1, ep.Network, mac, mac, 1500, false)
		for _, a := range ep.Addrs {
			if err := objs.Endpoints().Put(bpf.KeyFromAddr(a), val); err != nil {
				tb.Fatalf("seed endpoint %s: %v", id, err)
			}
		}
	}
	if h.in, err = firewall.NewInstaller(objs.Firewall()); err != nil {
		tb.Fatal(err)
	}
	if h.events, err = ringbuf.NewReader(objs.Firewall().Events); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.events.Close() })
	return h
}

func (h *fwHarness) do(fn func() error) error {
	runtime.LockOSThread()
	if err := netns.Set(h.ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err := fn()
	if serr := netns.Set(h.host); serr != nil {
		return errors.Join(err, serr)
	}
	runtime.UnlockOSThread()
	return err
}

// install validates, compiles and installs rs; every rule logs every hit,
// so the events name the deciding rule. Slot i is rule i of the policy.
func (h *fwHarness) install(tb testing.TB, rs *firewall.RuleSet, logAll bool) *firewall.Policy {
	tb.Helper()
	pol, err := firewall.Validate(rs, fwtest.Resolver())
	if err != nil {
		tb.Fatalf("validate: %v", err)
	}
	slots := map[string]uint32{}
	for i := range pol.Rules {
		slots[pol.Rules[i].Name] = uint32(i)
		if logAll {
			pol.Rules[i].Sample = 1
		}
		h.in.ResetCounter(uint32(i))
	}
	tab, err := firewall.Compile(pol, slots)
	if err != nil {
		tb.Fatalf("compile: %v", err)
	}
	if _, err := h.in.Install(tab); err != nil {
		tb.Fatalf("install: %v", err)
	}
	return pol
}

// run feeds frame to the program of kind k and returns its verdict: true
// when the program dropped it.
func (h *fwHarness) run(k firewall.Kind, frame []byte) (dropped bool, err error) {
	var prog *ebpf.Program
	shot := uint32(tcShot)
	switch k {
	case firewall.KindFromEP:
		prog = h.objs.FromEndpoint()
	case firewall.KindToEP:
		prog = h.objs.ToEndpoint()
	default:
		prog, shot = h.objs.XDPFromUplink(), xdpDrop
	}
	var ret uint32
	err = h.do(func() (err error) {
		ret, err = prog.Run(&ebpf.RunOptions{Data: frame})
		return err
	})
	return ret == shot, err
}

// drain returns the slots of the events since the last call.
func (h *fwHarness) drain(tb testing.TB) []int {
	tb.Helper()
	var out []int
	for {
		h.events.SetDeadline(time.Now())
		rec, err := h.events.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			tb.Fatalf("read events: %v", err)
		}
		var e bpf.FwEvent
		if len(rec.RawSample) < 8 {
			tb.Fatalf("short event")
		}
		e.Slot = uint32(rec.RawSample[8]) | uint32(rec.RawSample[9])<<8 | uint32(rec.RawSample[10])<<16 | uint32(rec.RawSample[11])<<24
		out = append(out, int(e.Slot))
	}
}

// linkScope mirrors parse.h: destinations Linux handles before the
// firewall, and sources the anti-spoofing stage drops.
func linkScope(a netip.Addr) bool {
	return a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() ||
		(a.Is4() && (a.As4()[0] == 0 || a.As4()[0] >= 224))
}

func isEndpoint(a netip.Addr) bool {
	for _, e := range fwtest.Endpoints {
		for _, x := range e.Addrs {
			if x == a {
				return true
			}
		}
	}
	return false
}

// TestFirewallDifferential: random rule sets up to 2,000 rules, random
// packets through the three hooks; the rule that decides (and the log
// rules on the way), read from the event ring, and the verdict must be
// the reference model's.
func TestFirewallDifferential(t *testing.T) {
	h := newFwHarness(t)
	sizes := []int{1, 3, 10, 50, 200, 1000, 2000}
	packets := 400
	if testing.Short() {
		sizes, packets = []int{1, 10, 200}, 100
	}
	for seed, n := range sizes {
		rng := rand.New(rand.NewPCG(uint64(seed)+100, uint64(n)))
		rs := fwtest.RandomRuleSet(rng, n)
		pol := h.install(t, rs, true)
		h.drain(t)
		checked := 0
		for checked < packets {
			k := []firewall.Kind{firewall.KindFromEP, firewall.KindToEP, firewall.KindUplink}[rng.IntN(3)]
			pk := fwtest.RandomPacket(rng, k)
			if linkScope(pk.Dst) || linkScope(pk.Src) || (k == firewall.KindUplink && isEndpoint(pk.Dst)) {
				continue
			}
			frame, err := fwtest.Frame(pk)
			if err != nil {
				t.Fatal(err)
			}
			dropped, err := h.run(k, frame)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			got := h.drain(t)
			want, wantLog := pol.Evaluate(pk)
			wantSlots := append([]int(nil), wantLog...)
			wantDrop := false
			if want >= 0 {
				wantSlots = append(wantSlots, want)
				wantDrop = pol.Rules[want].Action != bpf.FwAllow
			}
			if fmt.Sprint(got) != fmt.Sprint(wantSlots) || dropped != wantDrop {
				desc := "(no rule)"
				if want >= 0 {
					desc = fmt.Sprintf("%s %+v", pol.Rules[want].Name, pol.Rules[want])
				}
				t.Fatalf("%d rules, %s packet %+v:\n\tdatapath: rules %v, dropped %v\n\treference: rules %v, dropped %v: %s",
					n, k, pk, got, dropped, wantSlots, wantDrop, desc)
			}
			checked++
		}
		t.Logf("%d rules (%d in the policy): %d packets agree", n, len(pol.Rules), checked)
	}
}
