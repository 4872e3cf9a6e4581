package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// shared holds the sets of objects the tests of this package run on, one
// per Options, loaded on first use and kept for the test binary. Loading
// verifies seven collections: ~1 s on a quiet host, 10-15 s in the kernel
// matrix's emulated guests (over a minute beside other guests), where
// loading once per test made this package most of CI's time: the tests
// that ask for Options (a cluster node's programs, a small conntrack
// table, no monitor) loaded them anew each. Tests run one at a time (none
// is parallel), so each takes its set with every map emptied, as a fresh
// load leaves them. The maps are mostly BPF_F_NO_PREALLOC hashes: an idle
// set costs little memory.
var shared struct {
	sync.Mutex
	sets map[Options]*sharedSet
}

// sharedSet is one set of shared objects, the netkit programs loaded on it
// (NetkitFor), or why it did not load.
type sharedSet struct {
	objs *Objects
	nk   *NetkitObjects
	err  error
}

// ObjectsFor returns the objects a test runs on: for dir "" the shared set
// of its Options (none: the defaults) with every map emptied; otherwise
// LoadFrom(dir, o...), closed when the test ends. A test that changes what
// a load decides (a map's size, a program) loads its own with Load.
func ObjectsFor(tb testing.TB, dir string, o ...Options) *Objects {
	tb.Helper()
	if dir != "" {
		objs, err := LoadFrom(dir, o...)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { objs.Close() })
		return objs
	}
	var opt Options
	if len(o) > 0 {
		opt = o[0]
	}
	shared.Lock()
	defer shared.Unlock()
	if shared.sets == nil {
		shared.sets = map[Options]*sharedSet{}
	}
	set := shared.sets[opt]
	if set == nil {
		set = &sharedSet{}
		set.objs, set.err = Load("", opt)
		shared.sets[opt] = set
	}
	if set.err != nil {
		tb.Fatal(set.err)
	}
	err := resetMaps(set.objs)
	if errors.Is(err, errTooFull) {
		// Deleting a blocklist's million prefixes one by one costs more
		// than loading anew.
		if set.nk != nil {
			set.nk.Close()
			set.nk = nil
		}
		set.objs.Close()
		if set.objs, err = Load("", opt); err != nil {
			set.err = err
			tb.Fatal(err)
		}
	}
	if err != nil {
		tb.Fatalf("empty the shared objects' maps: %v", err)
	}
	return set.objs
}

// NetkitFor is objs.LoadNetkit, loaded once for a shared set.
func NetkitFor(tb testing.TB, objs *Objects) *NetkitObjects {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	var set *sharedSet
	for _, s := range shared.sets {
		if s.objs == objs {
			set = s
		}
	}
	if set != nil && set.nk != nil {
		return set.nk
	}
	nk, err := objs.LoadNetkit()
	if err != nil {
		tb.Fatal(err)
	}
	if set != nil {
		set.nk = nk
	} else {
		tb.Cleanup(func() { nk.Close() })
	}
	return nk
}

// maxReset is the most entries resetMaps deletes from one map; beyond it a
// new load is cheaper (errTooFull).
const maxReset = 4096

var errTooFull = errors.New("too many entries to delete one by one")

// resetMaps empties every map of o: hash and trie entries and map-in-map
// slots deleted, arrays zeroed, ring buffers drained.
func resetMaps(o *Objects) error {
	for name, m := range o.maps {
		if err := resetMap(m); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func resetMap(m *ebpf.Map) error {
	switch m.Type() {
	case ebpf.RingBuf:
		return drainRing(m)
	case ebpf.Array, ebpf.PerCPUArray:
		return zeroArray(m)
	case ebpf.ArrayOfMaps, ebpf.DevMap, ebpf.ProgramArray:
		for k := uint32(0); k < m.MaxEntries(); k++ {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
		}
		return nil
	}
	var keys [][]byte
	var k any // nil: the first key
	for {
		next, err := m.NextKeyBytes(k)
		if err != nil {
			return err
		}
		if next == nil {
			break
		}
		if len(keys) == maxReset {
			return errTooFull
		}
		keys, k = append(keys, next), next
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// zeroArray zeroes every slot of an array in one batch (one syscall: the
// firewall's counters have 16,384 slots), slot by slot where the kernel
// has no batch operations.
func zeroArray(m *ebpf.Map) error {
	n, cpus := int(m.MaxEntries()), 1
	if m.Type() == ebpf.PerCPUArray {
		cpus = ebpf.MustPossibleCPU()
	}
	keys := make([]uint32, n)
	vals := make([][]byte, n*cpus)
	for i := range vals {
		vals[i] = make([]byte, m.ValueSize())
		if i < n {
			keys[i] = uint32(i)
		}
	}
	if m.Type() == ebpf.Array {
		if _, err := m.BatchUpdate(keys, make([]byte, n*int(m.ValueSize())), nil); err == nil {
			return nil
		}
	} else if _, err := m.BatchUpdate(keys, vals, nil); err == nil {
		return nil
	}
	for k := range keys {
		if err := m.Put(keys[k], vals[k*cpus:(k+1)*cpus]); err != nil {
			if m.Type() == ebpf.Array {
				err = m.Put(keys[k], vals[k])
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// drainRing reads and drops what an earlier test left in a ring buffer.
func drainRing(m *ebpf.Map) error {
	r, err := ringbuf.NewReader(m)
	if err != nil {
		return err
	}
	defer r.Close()
	r.SetDeadline(time.Now())
	for {
		if _, err := r.Read(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
	}
}
