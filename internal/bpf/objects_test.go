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

// shared is the one set of objects the tests of this package run on.
// Loading verifies five collections: ~1 s on the host, 10-15 s in the
// kernel matrix's emulated guests, where loading once per test made this
// package most of CI's time. Tests run one at a time (none is parallel), so
// each takes the set with every map emptied, as a fresh load leaves them.
var shared struct {
	sync.Mutex
	objs *Objects
	nk   *NetkitObjects
	err  error
}

// ObjectsFor returns the objects a test runs on: for dir "" and no options
// the shared set with every map emptied; otherwise LoadFrom(dir, o...),
// closed when the test ends.
func ObjectsFor(tb testing.TB, dir string, o ...Options) *Objects {
	tb.Helper()
	if dir != "" || len(o) > 0 {
		objs, err := LoadFrom(dir, o...)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { objs.Close() })
		return objs
	}
	shared.Lock()
	defer shared.Unlock()
	if shared.objs == nil && shared.err == nil {
		shared.objs, shared.err = Load("")
	}
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	err := resetMaps(shared.objs)
	if errors.Is(err, errTooFull) {
		// Deleting a blocklist's million prefixes one by one costs more
		// than loading anew.
		if shared.nk != nil {
			shared.nk.Close()
			shared.nk = nil
		}
		shared.objs.Close()
		if shared.objs, err = Load(""); err != nil {
			shared.err = err
			tb.Fatal(err)
		}
	}
	if err != nil {
		tb.Fatalf("empty the shared objects' maps: %v", err)
	}
	return shared.objs
}

// NetkitFor is objs.LoadNetkit, loaded once for the shared objects.
func NetkitFor(tb testing.TB, objs *Objects) *NetkitObjects {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if objs == shared.objs && shared.nk != nil {
		return shared.nk
	}
	nk, err := objs.LoadNetkit()
	if err != nil {
		tb.Fatal(err)
	}
	if objs == shared.objs {
		shared.nk = nk
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
