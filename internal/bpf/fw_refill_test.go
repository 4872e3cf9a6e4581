package bpf_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestFirewallRefillLongIdle: a source idle long enough to fill its
// bucket finds it full, however large rate x idle time is. The refill
// multiplied the nanoseconds elapsed by the rate in 64 bits, which wraps
// after 2^64 / rate ns (184 s at the 1e8/s the spec allows) and left such
// a bucket anywhere between empty and full. Here the rate is the u32
// maximum, which wraps after 4.3 s, so the test needs only a few seconds
// of clock (machine booted moments ago, or a fresh VM): the entry's last
// refill is set 4.8 s back, mid-way through the window where the wrapped
// product is below the bucket's depth.
func TestFirewallRefillLongIdle(t *testing.T) {
	h := newFwHarness(t)
	const top = ^uint32(0)
	if err := h.in.SetDDoS(bpf.FwDdos{Flags: bpf.FwDdosRate, Pps: top, Burst: top, V4Prefix: 32, V6Prefix: 64}); err != nil {
		t.Fatal(err)
	}
	frame := tcpFrame(t, "198.51.100.7", "192.0.2.1", 0x10)
	if ret, reason := h.runUplink(t, frame); ret == xdpDrop {
		t.Fatalf("first packet dropped (%s)", reason)
	}
	var (
		k     bpf.FwRateKey
		v     bpf.FwRateVal
		found bool
	)
	for it := h.objs.Firewall().Rate.Iterate(); it.Next(&k, &v); {
		found = true
	}
	if !found {
		t.Fatal("no bucket for the source")
	}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	idle := uint64(4800 * time.Millisecond)
	if uint64(ts.Nano()) <= idle {
		t.Fatalf("clock %v since boot: below the %v idle the test sets", time.Duration(ts.Nano()), time.Duration(idle))
	}
	v = bpf.FwRateVal{Last: uint64(ts.Nano()) - idle}
	if err := h.objs.Firewall().Rate.Put(&k, &v); err != nil {
		t.Fatal(err)
	}
	if ret, reason := h.runUplink(t, frame); ret == xdpDrop {
		t.Fatalf("packet after the idle dropped (%s)", reason)
	}
	if err := h.objs.Firewall().Rate.Lookup(&k, &v); err != nil {
		t.Fatal(err)
	}
	// Full (burst x 1e9), less the packet's token.
	if want := uint64(top)*1e9 - 1e9; v.Tokens != want {
		t.Errorf("tokens after %v idle: %d, want %d (full less one)", time.Duration(idle), v.Tokens, want)
	}
}
