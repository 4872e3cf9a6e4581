package main

// Conntrack memory and GC cost at a million entries, for `bench/nat`: a
// scratch datapath (internal/datapath, the daemon's code) with its own pin
// directory, xlane_ct filled directly with synthetic flows.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/datapath"
)

// natGCResult is what natMeasureCTGC found.
type natGCResult struct {
	Entries, Expired int
	// CPU (user+sys of this process) and wall time of one GC pass, ms,
	// Median over the repetitions: the daemon's batched GCCT and the
	// per-entry Iterate+Delete walk it replaced, deleting Expired entries
	// of Entries, and with nothing to delete.
	BatchCPU, BatchWall, LegacyCPU, LegacyWall                 float64
	BatchNoopCPU, BatchNoopWall, LegacyNoopCPU, LegacyNoopWall float64
	StatsCPU, FlushCPU                                         float64
	// Memory per entry: xlane ct stats' estimate, bpftool's memlock
	// accounting (delta empty -> full over the entries), and the kernel's
	// slab memory actually allocated (delta of /proc/slabinfo).
	StatsBytesPerEntry              int
	MemlockEmpty, MemlockFull       uint64
	MemlockPerEntry, SlabPerEntry   float64
	SlabGrew                        string // the caches that grew, e.g. "kmalloc-cg-192 +1000123"
	MaxEntries                      uint32
	NfConntrackObjSize, NfCtBuckets int // Linux conntrack, for comparison
	Reps                            int
}

func natMonoNanos() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func natCPUNow() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// natTimed returns fn's process CPU and wall time in milliseconds.
func natTimed(fn func() error) (cpu, wall float64, err error) {
	runtime.GC()
	c0, w0 := natCPUNow(), time.Now()
	err = fn()
	return float64(natCPUNow()-c0) / 1e6, float64(time.Since(w0)) / 1e6, err
}

// natSynthCT is the i-th synthetic flow (TCP from 100.64.0.0/10, which no
// benchmark traffic uses).
func natSynthCT(i int) bpf.CTKey {
	src := netip.AddrFrom4([4]byte{100, 64 + byte(i>>24&0x3f), byte(i >> 16), byte(i >> 8)})
	k := bpf.CTKey{Saddr: src.As16(), Daddr: netip.MustParseAddr("100.127.0.1").As16(), Proto: unix.IPPROTO_TCP}
	k.Sport = natNBO16(uint16(1024 + i&0xff))
	k.Dport = natNBO16(1)
	return k
}

// natNbo16 is the network-order value a u16 field of a BPF struct holds.
func natNBO16(v uint16) uint16 { return v<<8 | v>>8 }

// natFillCT puts the entries i for which pick(i) (nil: all) into m; expired
// entries' deadlines passed an hour ago, the others' are a day away.
func natFillCT(m *ebpf.Map, n int, pick func(i int) bool, expired func(i int) bool) error {
	const chunk = 1 << 16
	now := natMonoNanos()
	keys := make([]bpf.CTKey, 0, chunk)
	vals := make([]bpf.CTVal, 0, chunk)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		_, err := m.BatchUpdate(keys, vals, nil)
		keys, vals = keys[:0], vals[:0]
		return err
	}
	for i := 0; i < n; i++ {
		if pick != nil && !pick(i) {
			continue
		}
		v := bpf.CTVal{Expires: now + uint64(24*time.Hour), State: 1, Packets: 5, Bytes: 400}
		if expired(i) {
			v.Expires = 1 // boot: "now - an hour" wraps on a machine up for less than an hour
		}
		keys, vals = append(keys, natSynthCT(i)), append(vals, v)
		if len(keys) == chunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// natLegacyGC is datapath.GCCT as it was before batching: Map.Iterate (a
// get-next-key and a lookup system call per entry) collecting the expired
// keys, then one delete system call per key.
func natLegacyGC(m *ebpf.Map, grace uint64) (int, error) {
	now := natMonoNanos()
	var (
		k    bpf.CTKey
		v    bpf.CTVal
		keys []bpf.CTKey
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if v.Expires+grace < now {
			keys = append(keys, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	n := 0
	for i := range keys {
		if err := m.Delete(&keys[i]); err == nil {
			n++
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, err
		}
	}
	return n, nil
}

// natSlabBytes is the memory of every slab cache (num_objs x objsize).
func natSlabBytes() (map[string]int64, error) {
	b, err := os.ReadFile("/proc/slabinfo")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "slabinfo") {
			continue
		}
		n, err1 := strconv.ParseInt(f[2], 10, 64)
		sz, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 == nil && err2 == nil {
			out[f[0]] += n * sz
		}
	}
	return out, nil
}

func natSlabObjSize(cache string) int {
	b, _ := os.ReadFile("/proc/slabinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == cache {
			n, _ := strconv.Atoi(f[3])
			return n
		}
	}
	return 0
}

// natMemlock is bpftool's bytes_memlock of the map pinned at path.
func natMemlock(ctx context.Context, path string) (uint64, error) {
	out, err := harness.Run(ctx, "bpftool", "-j", "map", "show", "pinned", path)
	if err != nil {
		return 0, err
	}
	var info struct {
		BytesMemlock json.Number `json:"bytes_memlock"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return 0, fmt.Errorf("bpftool map show: %w: %q", err, out)
	}
	v, err := strconv.ParseUint(info.BytesMemlock.String(), 10, 64)
	return v, err
}

func natMedianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// natMeasureCTGC fills a scratch xlane_ct with a million entries (a tenth of
// them expired) and measures memory per entry and the GC passes.
func natMeasureCTGC(ctx context.Context, pinDir string, reps int) (res natGCResult, err error) {
	const entries, grace = 1_000_000, uint64(10 * time.Second)
	expired := func(i int) bool { return i%10 == 0 }
	res.Entries, res.Expired, res.Reps = entries, entries/10, reps
	dp, err := datapath.Open(pinDir, bpf.Options{})
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(pinDir)
	defer dp.Close()
	pin := filepath.Join(pinDir, "maps", "xlane_ct")
	m, err := ebpf.LoadPinnedMap(pin, nil)
	if err != nil {
		return res, err
	}
	defer m.Close()
	res.MaxEntries = m.MaxEntries()
	st, err := dp.CTStats()
	if err != nil {
		return res, err
	}
	res.StatsBytesPerEntry = st.BytesPerEntry
	if res.MemlockEmpty, err = natMemlock(ctx, pin); err != nil {
		return res, err
	}
	slab0, err := natSlabBytes()
	if err != nil {
		return res, err
	}
	if err := natFillCT(m, entries, nil, expired); err != nil {
		return res, fmt.Errorf("fill: %w", err)
	}
	time.Sleep(500 * time.Millisecond) // let per-CPU allocator refills settle
	slab1, _ := natSlabBytes()
	if res.MemlockFull, err = natMemlock(ctx, pin); err != nil {
		return res, err
	}
	res.MemlockPerEntry = float64(res.MemlockFull-res.MemlockEmpty) / entries
	// The cache the table's elements went to is the one that grew by far
	// the most; others move with whatever else runs on the machine.
	var top string
	var delta int64
	for name, b := range slab1 {
		if d := b - slab0[name]; d > delta {
			top, delta = name, d
		}
	}
	res.SlabGrew = fmt.Sprintf("%s +%.0f MB", top, float64(delta)/1e6)
	res.SlabPerEntry = float64(delta) / entries
	res.NfConntrackObjSize = natSlabObjSize("nf_conntrack")
	if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_buckets"); err == nil {
		res.NfCtBuckets, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}

	readd := func() error { return natFillCT(m, entries, expired, expired) }
	var bc, bw, lc, lw, bnc, bnw, lnc, lnw, sc []float64
	for r := 0; r < reps; r++ {
		for _, legacyFirst := range []bool{r%2 == 1, r%2 == 0} {
			var n int
			c, w, err := natTimed(func() (err error) {
				if legacyFirst {
					n, err = natLegacyGC(m, grace)
				} else {
					n, err = dp.GCCT(grace, nil)
				}
				return err
			})
			if err != nil || n != entries/10 {
				return res, fmt.Errorf("gc pass (legacy %v): deleted %d, %v", legacyFirst, n, err)
			}
			if legacyFirst {
				lc, lw = append(lc, c), append(lw, w)
			} else {
				bc, bw = append(bc, c), append(bw, w)
			}
			if err := readd(); err != nil {
				return res, err
			}
		}
		// Nothing older than two days: a full walk that deletes nothing.
		noop := uint64(48 * time.Hour)
		c, w, err := natTimed(func() error { _, err := natLegacyGC(m, noop); return err })
		if err != nil {
			return res, err
		}
		lnc, lnw = append(lnc, c), append(lnw, w)
		c, w, err = natTimed(func() error { _, err := dp.GCCT(noop, nil); return err })
		if err != nil {
			return res, err
		}
		bnc, bnw = append(bnc, c), append(bnw, w)
		c, _, err = natTimed(func() error { _, err := dp.CTStats(); return err })
		if err != nil {
			return res, err
		}
		sc = append(sc, c)
	}
	res.BatchCPU, res.BatchWall, res.LegacyCPU, res.LegacyWall = natMedianOf(bc), natMedianOf(bw), natMedianOf(lc), natMedianOf(lw)
	res.BatchNoopCPU, res.BatchNoopWall, res.LegacyNoopCPU, res.LegacyNoopWall = natMedianOf(bnc), natMedianOf(bnw), natMedianOf(lnc), natMedianOf(lnw)
	res.StatsCPU = natMedianOf(sc)
	c, _, err := natTimed(func() error { _, err := dp.FlushCT(); return err })
	res.FlushCPU = c
	return res, err
}
