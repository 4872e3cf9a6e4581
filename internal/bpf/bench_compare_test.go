package bpf

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// Same-run comparison of two builds of the datapath: the embedded objects
// ("new") against the bpf2go output of another commit ("old", the
// directory in XLANE_BENCH_OLD). Both are loaded side by side, each into
// its own test netns, and every path is measured old, new, new, old, ...
// in rounds, so load from other processes on the machine hits both alike;
// the figures are medians of the rounds. A second copy of the old objects
// runs alongside as a control: its ratio to the first is the noise floor
// of the run. Run:
//
//	XLANE_BENCH_OLD=/path/to/old go test -run '^$' -bench Compare -benchtime 1x ./internal/bpf
//
// BenchmarkCompareFirewall (fw_test.go's harness) covers the uplink.

const (
	compareRounds = 61
	compareCalls  = 12  // BPF_PROG_TEST_RUN calls per sample
	compareBatch  = 250 // runs per call: TTL 255 allows 254 forwards
)

// comparePath is one measured path: prog of h on frame, expecting want.
type comparePath struct {
	name  string
	prog  func(h *harness) *ebpf.Program
	frame []byte
	want  int32
}

// sampleRuns returns the kernel's ns per run of prog over calls × batch runs.
func sampleRuns(do func(func() error) error, prog *ebpf.Program, frame []byte, want int32, calls, batch int) (float64, error) {
	var total time.Duration
	err := do(func() error {
		for range calls {
			ret, perRun, err := prog.Benchmark(frame, batch, nil)
			if err != nil {
				return err
			}
			if int32(ret) != want {
				return fmt.Errorf("return value %d, want %d", int32(ret), want)
			}
			total += perRun * time.Duration(batch)
		}
		return nil
	})
	return float64(total.Nanoseconds()) / float64(calls*batch), err
}

// compareReport logs the medians of old, new and the control (old again)
// per path, and the ratios to old.
func compareReport(b *testing.B, names []string, s [3]map[string][]float64) {
	b.Logf("%-30s %8s %8s %8s %8s %8s", "path", "old ns", "new ns", "ctl ns", "new/old", "ctl/old")
	for _, n := range names {
		o, c, a := median(s[0][n]), median(s[1][n]), median(s[2][n])
		b.Logf("%-30s %8.1f %8.1f %8.1f %8.3f %8.3f", n, o, c, a, c/o, a/o)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func BenchmarkCompareDatapath(b *testing.B) {
	dir := os.Getenv("XLANE_BENCH_OLD")
	if dir == "" {
		b.Skip("XLANE_BENCH_OLD names no directory of old objects")
	}
	hs := []*harness{buildHarness(b, harnessCfg{dir: dir, xdp: true}), newXDPHarness(b), buildHarness(b, harnessCfg{dir: dir, xdp: true})}
	xdpRedirect := int32(4)
	paths := []comparePath{
		{"tc endpoint->peer", func(h *harness) *ebpf.Program { return h.objs.FromEndpoint() },
			pktSpec{src: epLo.v4, dst: epPeer.v4, ttl: 255}.frame(b), actRedirect},
		{"tc endpoint->fib", func(h *harness) *ebpf.Program { return h.objs.FromEndpoint() },
			pktSpec{src: epLo.v4, dst: addr("203.0.113.5"), ttl: 255}.frame(b), actRedirect},
		{"tc endpoint->peer v6", func(h *harness) *ebpf.Program { return h.objs.FromEndpoint() },
			pktSpec{src: epLo.v6, dst: epPeer.v6, ttl: 255}.frame(b), actRedirect},
		{"xdp native endpoint->peer", func(h *harness) *ebpf.Program { return h.objs.XDPFromEndpoint() },
			sized(b, pktSpec{src: epLo.v4, dst: xdpPeer.v4, ttl: 255}, 1514), xdpRedirect},
		{"xdp generic endpoint->peer", func(h *harness) *ebpf.Program { return h.objs.XDPGenericFromEndpoint() },
			sized(b, pktSpec{src: epLo.v4, dst: xdpPeer.v4, ttl: 255}, 1514), xdpRedirect},
	}
	samples := [3]map[string][]float64{{}, {}, {}}
	var names []string
	for _, p := range paths {
		names = append(names, p.name)
	}
	for r := range compareRounds {
		for _, p := range paths {
			for j := range 3 {
				i := (j + r) % 3 // each build leads in turn
				h := hs[i]
				ns, err := sampleRuns(h.do, p.prog(h), p.frame, p.want, compareCalls, compareBatch)
				if err != nil {
					b.Fatalf("%s (%s): %v", p.name, []string{"old", "new", "control"}[i], err)
				}
				samples[i][p.name] = append(samples[i][p.name], ns)
			}
		}
	}
	compareReport(b, names, samples)
}
