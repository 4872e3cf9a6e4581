package datapath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// MapUsage is how full one map is: entries over max_entries, what
// Cilium calls map pressure.
type MapUsage struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Entries    int    `json:"entries"`
	MaxEntries uint32 `json:"max_entries"`
}

// Pressure is Entries / MaxEntries.
func (u MapUsage) Pressure() float64 {
	if u.MaxEntries == 0 {
		return 0
	}
	return float64(u.Entries) / float64(u.MaxEntries)
}

// sizedTypes are the map types that fill up: arrays are always full, ring
// buffers and devmaps of slots have no entries to count.
var sizedTypes = map[ebpf.MapType]bool{
	ebpf.Hash: true, ebpf.PerCPUHash: true, ebpf.LRUHash: true, ebpf.LRUCPUHash: true,
	ebpf.LPMTrie: true, ebpf.HashOfMaps: true, ebpf.DevMapHash: true,
}

// MapUsage counts the entries of every map that can fill up (hashes, LRU
// hashes, LPM tries, hash of maps, the devmap), by name. Hashes are read a
// chunk at a time with BPF_MAP_LOOKUP_BATCH (one system call per 4096
// entries, the values copied too: a full 1M-entry conntrack table costs
// ~120 MB of copying, what `xlane ct stats` costs); other types key by key.
// known gives counts the caller has already made (xlane_ct's from
// CTStats), which are not made again.
func (d *BPF) MapUsage(known map[string]int) ([]MapUsage, error) {
	var out []MapUsage
	for name, m := range d.objs.Maps() {
		if !sizedTypes[m.Type()] {
			continue
		}
		n, ok := known[name]
		if !ok {
			var err error
			if n, err = countEntries(m); err != nil {
				return nil, fmt.Errorf("count entries of %s: %w", name, err)
			}
		}
		out = append(out, MapUsage{Name: name, Type: m.Type().String(), Entries: n, MaxEntries: m.MaxEntries()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// countEntries counts a map's entries: by batch lookups where the map
// type has them, else by walking its keys.
func countEntries(m *ebpf.Map) (int, error) {
	n, err := countBatch(m)
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		return countKeys(m)
	}
	return n, err
}

// countBatch reads the map in chunks into byte arrays of the key and
// value sizes (values per CPU for per-CPU maps) and counts what came.
func countBatch(m *ebpf.Map) (int, error) {
	size := ctChunk
	total := 0
	var cursor ebpf.MapBatchCursor
	for {
		keys := reflect.MakeSlice(reflect.SliceOf(reflect.ArrayOf(int(m.KeySize()), reflect.TypeFor[byte]())), size, size)
		vlen, vsize := size, int(m.ValueSize())
		if m.Type() == ebpf.PerCPUHash || m.Type() == ebpf.LRUCPUHash {
			cpus, err := ebpf.PossibleCPU()
			if err != nil {
				return 0, err
			}
			vlen, vsize = size*cpus, (vsize+7)&^7
		}
		vals := reflect.MakeSlice(reflect.SliceOf(reflect.ArrayOf(vsize, reflect.TypeFor[byte]())), vlen, vlen)
		n, err := m.BatchLookup(&cursor, keys.Interface(), vals.Interface(), nil)
		if errors.Is(err, unix.ENOSPC) && size < 1<<20 {
			size *= 2 // one bucket holds more than a chunk: retry larger
			continue
		}
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// countKeys walks the keys one system call each (LPM tries, devmaps and
// hash of maps are small here).
func countKeys(m *ebpf.Map) (int, error) {
	n := 0
	key := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	var prev any // nil: the first key
	for {
		err := m.NextKey(prev, next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		n++
		copy(key, next)
		prev = key
	}
}

// ProgramStats is what the kernel counts for one program while BPF run
// statistics are on (kernel.bpf_stats_enabled, or a BPF_ENABLE_STATS
// file descriptor held): runs and the time they took.
type ProgramStats struct {
	Name    string        `json:"name"`
	Runs    uint64        `json:"runs"`
	Runtime time.Duration `json:"runtime_ns"`
}

// ProgramStats reads the run count and run time of every loaded program
// (zero while statistics are off). The programs are this daemon's: a
// restarted xlaned swaps its own into the pinned links, and counts start
// from there.
func (d *BPF) ProgramStats() ([]ProgramStats, error) {
	progs := d.objs.Programs()
	if d.nk != nil {
		for name, p := range d.nk.Programs() {
			progs[name] = p
		}
	}
	var out []ProgramStats
	for name, p := range progs {
		st, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("program %s stats: %w", name, err)
		}
		out = append(out, ProgramStats{Name: name, Runs: st.RunCount, Runtime: st.Runtime})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// EnableRunStats turns the kernel's BPF run statistics on (BPF_ENABLE_STATS)
// until the returned closer is closed. It costs every BPF program on the
// machine two clock reads per run (tens of nanoseconds), which is why
// xlaned does it only when asked (--bpf-stats).
func EnableRunStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF run statistics: %w", err)
	}
	return c, nil
}

// RunStatsSysctl reports whether kernel.bpf_stats_enabled is set.
func RunStatsSysctl() bool {
	b, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
