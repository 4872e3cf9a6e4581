package bpf_test

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// TestFirewallLastHit: a rule's last hit is the coarse clock of its latest
// packet (to the tick), though the datapath reads the clock only when the
// jiffies or the counted rule changed on its CPU (fw_count_slot): in the
// list, the tuples and the bitmaps, a hit after a pause moves it on, a hit
// of another rule in the same tick sets that rule's, and a hit right after
// the daemon reset the counter sets it again.
func TestFirewallLastHit(t *testing.T) {
	h := newFwHarness(t)
	coarse := func() uint64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
			t.Fatal(err)
		}
		return uint64(ts.Nano())
	}
	lastHit := func(slot uint32) (packets, last uint64) {
		c, err := h.in.Counter(slot)
		if err != nil {
			t.Fatal(err)
		}
		return c.Packets, c.LastHit
	}
	for _, c := range []struct {
		name string
		n    int
		form func(g bpf.FwGen) bool
	}{
		{"list", 2, func(g bpf.FwGen) bool { return g.Lin != 0 }},
		{"tuples", bpf.FwLinMax + 1, func(g bpf.FwGen) bool { return g.Lin == 0 && g.Tuple4 != 0 }},
		{"bitmaps", bpf.FwLinMax + 1, func(g bpf.FwGen) bool { return g.Lin == 0 && g.Tuple4 == 0 }},
	} {
		rs := linRules(c.n)
		// l0 drops 203.0.113.1 to port 80, l1 allows 203.0.113.2 to 81.
		if c.name == "bitmaps" {
			rs.Rules[c.n-1].Src = firewall.List{"198.51.100.0/24"} // off the tuples' shape
		}
		h.install(t, rs, false)
		if !c.form(h.gen(t)) {
			t.Fatalf("%s: fw_gen %+v is not the form the case is for", c.name, h.gen(t))
		}
		frame := func(src string, dport uint32) []byte {
			f, err := fwtest.Frame(firewall.Packet{Kind: firewall.KindUplink, Src: netip.MustParseAddr(src),
				Dst: netip.MustParseAddr("10.1.0.2"), Proto: 6, SPort: 40001, DPort: dport, Flags: 0x10})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		drop, allow := frame("203.0.113.1", 80), frame("203.0.113.2", 81)
		hit := func(f []byte, what string) {
			t.Helper()
			if _, _, err := h.run(firewall.KindUplink, f); err != nil {
				t.Fatalf("%s: %s: %v", c.name, what, err)
			}
		}
		check := func(slot uint32, packets, after uint64, what string) uint64 {
			t.Helper()
			p, last := lastHit(slot)
			now := coarse()
			if p != packets || last == 0 || last+uint64(50*time.Millisecond) < after || last > now {
				t.Fatalf("%s: %s: rule l%d %d packets, last hit %d; want %d packets, last hit in [%d, %d] (to the tick)",
					c.name, what, slot, p, last, packets, after, now)
			}
			return last
		}
		t0 := coarse()
		hit(drop, "first drop")
		first := check(0, 1, t0, "first drop")
		hit(drop, "second drop")
		check(0, 2, t0, "second drop (same tick or not)")
		hit(allow, "allowed packet")
		check(1, 1, t0, "another rule's hit")
		time.Sleep(30 * time.Millisecond) // several ticks at any HZ
		t1 := coarse()
		hit(drop, "drop after a pause")
		if last := check(0, 3, t1, "drop after a pause"); last <= first {
			t.Fatalf("%s: last hit %d after a pause, not after the first %d", c.name, last, first)
		}
		if err := h.in.ResetCounter(0); err != nil {
			t.Fatal(err)
		}
		hit(drop, "drop after a reset")
		check(0, 1, t1, "drop after a reset")
	}
}
