package bpf_test

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// BenchmarkCompareUplinkDrop compares the uplink XDP program of the old
// objects (XLANE_BENCH_OLD, see bench_compare_test.go) with the embedded
// ones and a second copy of the old (the control), interleaved, on the
// rule sets and frames of `bench fw` (bench/fw): N-1 rules "drop udp from
// a /32 to port 9" that do not match, then the one that drops the
// sender's /32; UDP frames to port 9 from one source port (1 flow: one
// BPF_PROG_RUN call of compareDropRepeat runs) or cycling over 256
// (256 flows: one run per call, one call per frame, as bench fw's
// generator steps the port per frame). IPv4 and IPv6.
// XLANE_BENCH_PATHS (a regexp) picks paths, XLANE_BENCH_ROUNDS the rounds
// (default 31).
//
//	XLANE_BENCH_OLD=/tmp/old go test -run '^$' -bench CompareUplinkDrop -benchtime 1x ./internal/bpf
func BenchmarkCompareUplinkDrop(b *testing.B) {
	dir := os.Getenv("XLANE_BENCH_OLD")
	if dir == "" {
		b.Skip("XLANE_BENCH_OLD names no directory of old objects")
	}
	pick := regexp.MustCompile(os.Getenv("XLANE_BENCH_PATHS"))
	rounds := 31
	if s := os.Getenv("XLANE_BENCH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("XLANE_BENCH_ROUNDS %q", s)
		}
		rounds = n
	}
	const (
		compareDropRepeat = 3000
		flowCalls         = 512
	)
	type path struct {
		name   string
		frames [][]byte
		h      [3]*fwHarness
		ns     [3][]float64
	}
	var paths []*path
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{1, 10000} {
			for _, flows := range []int{1, 256} {
				for _, state := range []bool{true, false} {
					fam := "v4"
					if v6 {
						fam = "v6"
					}
					name := fmt.Sprintf("%s %d rules %d flows", fam, n, flows)
					if !state {
						name += " stateless"
					}
					if !pick.MatchString(name) {
						continue
					}
					p := &path{name: name}
					src, dst := netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("192.0.2.1")
					if v6 {
						src, dst = netip.MustParseAddr("2001:db8:ff::5"), netip.MustParseAddr("2001:db8::1")
					}
					for i := range flows {
						f, err := fwtest.Frame(firewall.Packet{Src: src, Dst: dst, Proto: 17, SPort: uint32(40000 + i), DPort: 9})
						if err != nil {
							b.Fatal(err)
						}
						p.frames = append(p.frames, f)
					}
					rs := &firewall.RuleSet{Established: &state}
					for i := 1; i < n; i++ {
						s := fmt.Sprintf("10.%d.%d.%d/32", i>>16&255, i>>8&255, i&255)
						if v6 {
							s = fmt.Sprintf("2001:db8:1::%x/128", i)
						}
						rs.Rules = append(rs.Rules, firewall.Rule{Name: fmt.Sprintf("r%d", i), Scope: "uplink", Action: "drop",
							Proto: firewall.List{"udp"}, Src: firewall.List{s}, DstPort: firewall.List{"9"}})
					}
					rs.Rules = append(rs.Rules, firewall.Rule{Name: "drop-gen", Scope: "uplink", Action: "drop",
						Proto: firewall.List{"udp"}, Src: firewall.List{netip.PrefixFrom(src, src.BitLen()).String()}, DstPort: firewall.List{"9"}})
					for i, d := range []string{dir, ".", dir} {
						p.h[i] = newFwHarnessFrom(b, d)
						if p.h[i].objs.MetricsUplink() != nil {
							setUplinkCounters(b, p.h[i].objs, 1)
						}
						p.h[i].install(b, rs, false)
					}
					paths = append(paths, p)
				}
			}
		}
	}
	for r := range rounds {
		for _, p := range paths {
			for j := range 3 {
				i := (j + r) % 3
				var d time.Duration
				err := p.h[i].do(func() error {
					prog := p.h[i].objs.XDPFromUplink()
					if len(p.frames) == 1 {
						ret, dk, err := prog.Benchmark(p.frames[0], compareDropRepeat, nil)
						if err == nil && ret != xdpDrop {
							err = fmt.Errorf("return value %d", ret)
						}
						d = dk
						return err
					}
					for k := range flowCalls {
						ret, dk, err := prog.Benchmark(p.frames[k%len(p.frames)], 1, nil)
						if err == nil && ret != xdpDrop {
							err = fmt.Errorf("return value %d", ret)
						}
						if err != nil {
							return err
						}
						d += dk
					}
					d /= flowCalls
					return nil
				})
				if err != nil {
					b.Fatalf("%s (%s): %v", p.name, []string{"old", "new", "control"}[i], err)
				}
				p.ns[i] = append(p.ns[i], float64(d.Nanoseconds()))
			}
		}
	}
	b.Logf("%-32s %8s %8s %8s %8s %8s", "path", "old ns", "new ns", "ctl ns", "new/old", "ctl/old")
	for _, p := range paths {
		o, c, a := fwMedian(p.ns[0]), fwMedian(p.ns[1]), fwMedian(p.ns[2])
		b.Logf("%-32s %8.1f %8.1f %8.1f %8.3f %8.3f", p.name, o, c, a, c/o, a/o)
	}
}
