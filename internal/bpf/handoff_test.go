package bpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"

	"github.com/cilium/ebpf"
)

// The handoff word an endpoint's XDP program leaves in front of a frame it
// passes (bpf/lib/handoff.h): XL_HANDOFF_MAGIC in the high 16 bits, the
// reason in the low 16.
const (
	handoffMagic = 0x584c
	handoffLen   = 4
)

// playTCX does for a test run what the tcx program behind XDP does with a
// frame XDP passed without counting (issue 12 item 10): it takes the
// handoff word off opts.DataOut and counts the frame once, under XDP's
// reason, on the device the context names (loopback without one), as tcx
// does for what it hands on to Linux. Reports whether there was a word.
func playTCX(prog *ebpf.Program, ret uint32, opts *ebpf.RunOptions, metrics *ebpf.Map) (bool, error) {
	out := opts.DataOut
	if prog.Type() != ebpf.XDP || ret != 2 /* XDP_PASS */ || len(out) != len(opts.Data)+handoffLen ||
		binary.LittleEndian.Uint32(out)>>16 != handoffMagic {
		return false, nil
	}
	r := Reason(binary.LittleEndian.Uint32(out) & 0xffff)
	if !verdictAgrees(prog.Type(), ret, r) {
		return true, fmt.Errorf("%s passed a frame with handoff reason %s: %w", prog, r, ErrVerdict)
	}
	opts.DataOut = out[handoffLen:]
	ifindex := uint32(1)
	if v := reflect.ValueOf(opts.Context); v.Kind() == reflect.Struct {
		if f := v.FieldByName("IngressIfindex"); f.IsValid() && f.Uint() != 0 {
			ifindex = uint32(f.Uint())
		}
	}
	// tcx counts it as XDP's decision (lib/skb_endpoint.h).
	k := MetricsKey{Ifindex: ifindex, Reason: uint8(r), Dir: uint8(DirEgress), Hook: uint8(HookXDP)}
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return true, err
	}
	vals := make([]MetricsVal, n)
	if err := metrics.Lookup(k, &vals); err != nil {
		vals = make([]MetricsVal, n)
	}
	vals[0].Packets++
	vals[0].Bytes += uint64(len(opts.Data))
	return true, metrics.Put(k, vals)
}

// TestXDPHandoff: what the endpoint's XDP program passes to Linux it does
// not count; it leaves its reason in front of the frame for the tcx
// program, which counts it (once: both counted before, issue 12 item 10).
func TestXDPHandoff(t *testing.T) {
	h := newXDPHarness(t)
	frame := tcp4(t, addr("198.18.2.9")) // gateway on a device not in xlane_devmap: pass_no_neigh
	for _, p := range []xdpProg{progNative, progGeneric} {
		t.Run(p.name, func(t *testing.T) {
			h.resetMetrics(t)
			opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
				Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(h.links[devEP0])}}
			var ret uint32
			if err := h.do(func() (err error) { ret, err = p.of(h.objs).Run(opts); return err }); err != nil {
				t.Fatal(err)
			}
			if int32(ret) != xdpPass {
				t.Fatalf("return value %d, want XDP_PASS", ret)
			}
			if m := h.metrics(t); len(m) != 0 {
				t.Errorf("XDP counted a frame it passed to tcx: %s", formatMetrics(m))
			}
			out := opts.DataOut
			if len(out) != len(frame)+handoffLen || binary.LittleEndian.Uint32(out)>>16 != handoffMagic {
				t.Fatalf("no handoff word in front of the passed frame (%d bytes out, %d in)", len(out), len(frame))
			}
			if r := Reason(binary.LittleEndian.Uint32(out) & 0xffff); r != passNoNeigh {
				t.Errorf("handoff reason %s, want %s", r, Reason(passNoNeigh))
			}
			if !bytes.Equal(out[handoffLen:], frame) {
				t.Errorf("passed frame changed")
			}
		})
	}
}
