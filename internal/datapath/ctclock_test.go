package datapath

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestCTClockSmallAndLarge runs the conntrack GC, stats and flow listing
// with the clock a few seconds past boot (a machine booted moments ago)
// and three weeks past it: deadlines at and near zero must neither wrap
// into "expires in 584 years" nor make the GC collect live or fresh
// entries.
func TestCTClockSmallAndLarge(t *testing.T) {
	d := openTest(t, "clock")
	const s = uint64(time.Second)
	for _, base := range []uint64{0, uint64(21 * 24 * time.Hour)} {
		t.Run(fmt.Sprintf("boot+%v", time.Duration(base+5*s)), func(t *testing.T) {
			now := base + 5*s
			d.clock = func() uint64 { return now }
			// Deadlines, by source port: at boot, 3 s and 1 s ago, in 30 s.
			deadlines := map[uint16]uint64{1: base, 2: base + 2*s, 3: base + 4*s, 4: base + 35*s}
			if base == 0 {
				deadlines[1] = 0
			}
			for port, exp := range deadlines {
				k := bpf.CTKey{Proto: unix.IPPROTO_TCP, Sport: htons(port), Dport: htons(80),
					Saddr: netip.MustParseAddr("10.9.0.1").As16(), Daddr: netip.MustParseAddr("10.9.0.2").As16()}
				v := bpf.CTVal{Expires: exp, State: uint8(bpf.CTEstablished)}
				if err := d.objs.CT().Update(&k, &v, ebpf.UpdateAny); err != nil {
					t.Fatal(err)
				}
			}
			defer d.FlushCT()

			st, err := d.CTStats()
			if err != nil || st.Entries != 4 || st.Expired != 3 {
				t.Fatalf("stats %+v, %v: want 4 entries, 3 expired", st, err)
			}
			flows, err := d.Flows(0)
			if err != nil {
				t.Fatal(err)
			}
			wantIn := map[uint16]int64{1: -5, 2: -3, 3: -1, 4: 30}
			for _, f := range flows {
				if w := wantIn[f.Src.Port()]; f.ExpiresInSeconds != w {
					t.Errorf("flow from port %d expires in %d s, want %d", f.Src.Port(), f.ExpiresInSeconds, w)
				}
			}
			// A grace longer than the clock: nothing is old enough.
			if n, err := d.GCCT(10*s, nil); err != nil || n != 0 {
				t.Fatalf("gc with 10 s grace at %d s: deleted %d, %v; want 0", now/s, n, err)
			}
			// 2 s grace: the deadlines 5 s and 3 s ago go.
			if n, err := d.GCCT(2*s, nil); err != nil || n != 2 {
				t.Fatalf("gc with 2 s grace: deleted %d, %v; want 2", n, err)
			}
			if st, err := d.CTStats(); err != nil || st.Entries != 2 || st.Expired != 1 {
				t.Fatalf("after gc: %+v, %v; want 2 entries, 1 expired", st, err)
			}
		})
	}
}
