package main

// Reading xlaned's BPF maps: what the datapath would use, not what the
// daemon logs. A mapWatch reads xlane_services, xlane_backends and
// xlane_peers from the pin dir every interval and checks the expectations
// registered since (a backend address present, a service key gone, ...):
// the delay of a change is from its API write to the first read that
// shows it, so it is exact to one interval (-poll) plus the read itself.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// mapState is one read of the maps.
type mapState struct {
	at       time.Time
	svcs     map[bpf.ServiceKey]bool
	live     map[[16]byte]int // backend address -> entries taking new flows
	draining map[[16]byte]int // backend address -> entries draining (weight 0)
	peers    map[bpf.PeerKey]uint16
	backends int // entries of xlane_backends
}

func (s *mapState) hasBackend(a netip.Addr) bool { return s.live[a.As16()] > 0 }

func (s *mapState) hasService(vip netip.AddrPort) bool {
	return s.svcs[bpf.ServiceKey{Addr: vip.Addr().As16(), Port: vip.Port()<<8 | vip.Port()>>8, Proto: 6}]
}

// hasPeer: the prefix is in xlane_peers and not marked gone.
func (s *mapState) hasPeer(p netip.Prefix) bool {
	k := bpf.PeerKey{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
	if p.Addr().Is4() {
		k.Prefixlen += 96
	}
	f, ok := s.peers[k]
	return ok && f&bpf.PeerFlagGone == 0
}

// expect is a change waited for: cond true on a read after t0; key is
// the change as the bench's watch sees it (seen.go), undo its opposite
// (the address ready again, the port back).
type expect struct {
	kind      string
	t0        time.Time
	key, undo string
	cond      func(*mapState) bool
}

// delays is what one kind of change measured.
type delays struct {
	Ms []float64 // API write -> map, each change seen
	// XlanedMs: xlaned's part of each, from the bench's watch seeing the
	// change come out of the API server to the map (seen.go); Unseen:
	// changes in the maps the bench's watch had not seen yet, left out
	// of it.
	XlanedMs []float64
	Unseen   int
	// Lost: not seen within expectTimeout. Ambiguous: already true when
	// registered (an address reused before its old entry went), or
	// undone in the API before the maps showed it (a pod stopped again,
	// its address reused, a port removed again: xlaned may coalesce the
	// two), left out.
	Lost, Ambiguous int
}

const expectTimeout = 30 * time.Second

type mapWatch struct {
	dir   string // the pin dir's maps/
	every time.Duration
	seen  *seenLog

	mu      sync.Mutex
	last    *mapState
	pending []*expect
	res     map[string]*delays
	reads   int
	readFor time.Duration
	err     error

	cancel context.CancelFunc
	done   chan struct{}
}

// newMapWatch starts reading the maps of the xlaned pinned at pinDir.
func newMapWatch(pinDir string, every time.Duration, seen *seenLog) *mapWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &mapWatch{dir: filepath.Join(pinDir, "maps"), every: every, seen: seen, res: map[string]*delays{}, cancel: cancel, done: make(chan struct{})}
	go w.loop(ctx)
	return w
}

func (w *mapWatch) close() {
	w.cancel()
	<-w.done
}

func (w *mapWatch) loop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		st, err := readMaps(w.dir)
		w.mu.Lock()
		if err != nil {
			// The maps are not there before xlaned pins them; any
			// other error fails the waits until a read succeeds.
			if !errors.Is(err, os.ErrNotExist) {
				w.err = err
			}
		} else {
			w.err = nil
			w.reads++
			w.readFor += time.Since(st.at)
			w.last = st
			w.check(st)
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check settles the expectations st satisfies, or that timed out.
func (w *mapWatch) check(st *mapState) {
	kept := w.pending[:0]
	for _, e := range w.pending {
		d := w.kind(e.kind)
		switch {
		case st.at.Before(e.t0):
			// A read begun before the change was made proves nothing.
			kept = append(kept, e)
		case e.cond(st):
			d.Ms = append(d.Ms, float64(st.at.Sub(e.t0).Microseconds())/1000)
			if t, ok := w.seen.since(e.key, e.t0); ok && !t.After(st.at) {
				d.XlanedMs = append(d.XlanedMs, float64(st.at.Sub(t).Microseconds())/1000)
			} else {
				d.Unseen++
			}
		case w.undone(e):
			d.Ambiguous++
		case st.at.Sub(e.t0) > expectTimeout:
			d.Lost++
		default:
			kept = append(kept, e)
		}
	}
	clear(w.pending[len(kept):])
	w.pending = kept
}

// undone says whether the bench's watch saw e's change undone after it.
func (w *mapWatch) undone(e *expect) bool {
	did, ok := w.seen.since(e.key, e.t0)
	if !ok {
		return false
	}
	_, ok = w.seen.since(e.undo, did)
	return ok
}

func (w *mapWatch) kind(k string) *delays {
	d := w.res[k]
	if d == nil {
		d = &delays{}
		w.res[k] = d
	}
	return d
}

// expect registers a change of kind made at t0 that cond recognises (key:
// the change as the bench's watch sees it). A cond already true now is
// counted ambiguous and not timed.
func (w *mapWatch) expect(kind string, t0 time.Time, key, undo string, cond func(*mapState) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last != nil && cond(w.last) {
		w.kind(kind).Ambiguous++
		return
	}
	w.pending = append(w.pending, &expect{kind: kind, t0: t0, key: key, undo: undo, cond: cond})
}

// settle waits until every expectation is settled (seen or timed out).
func (w *mapWatch) settle(ctx context.Context) error {
	for {
		w.mu.Lock()
		n, err := len(w.pending), w.err
		w.mu.Unlock()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.every):
		}
	}
}

// take returns the delays measured since the last take and starts anew.
func (w *mapWatch) take() map[string]*delays {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.res
	w.res = map[string]*delays{}
	return r
}

// wait polls until cond holds on a read (the read's time returned), or
// timeout.
func (w *mapWatch) wait(ctx context.Context, what string, timeout time.Duration, cond func(*mapState) bool) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		st, err := w.last, w.err
		w.mu.Unlock()
		if err != nil {
			return time.Time{}, err
		}
		if st != nil && cond(st) {
			return st.at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: not in the BPF maps after %v", what, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(w.every):
		}
	}
}

// state is the last read.
func (w *mapWatch) state() *mapState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// readStats is how many reads were made and their mean time.
func (w *mapWatch) readStats() (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reads == 0 {
		return 0, 0
	}
	return w.reads, w.readFor / time.Duration(w.reads)
}

// readMaps reads the three maps pinned in dir: the hashes a chunk at a
// time (BPF_MAP_LOOKUP_BATCH), the LPM trie key by key.
func readMaps(dir string) (*mapState, error) {
	st := &mapState{at: time.Now(), svcs: map[bpf.ServiceKey]bool{}, live: map[[16]byte]int{}, draining: map[[16]byte]int{},
		peers: map[bpf.PeerKey]uint16{}}
	err := batchRead(filepath.Join(dir, "xlane_services"), func(k bpf.ServiceKey, _ bpf.ServiceVal) {
		st.svcs[k] = true
	})
	if err != nil {
		return nil, err
	}
	err = batchRead(filepath.Join(dir, "xlane_backends"), func(_ bpf.BackendKey, v bpf.BackendVal) {
		st.backends++
		if v.Flags&1 != 0 { // BACKEND_DRAINING
			st.draining[v.Addr]++
		} else {
			st.live[v.Addr]++
		}
	})
	if err != nil {
		return nil, err
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "xlane_peers"), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var k bpf.PeerKey
	var v bpf.PeerVal
	it := m.Iterate()
	for it.Next(&k, &v) {
		st.peers[k] = v.Flags
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read xlane_peers: %w", err)
	}
	return st, nil
}

const batchChunk = 4096

func batchRead[K, V any](pin string, each func(K, V)) error {
	m, err := ebpf.LoadPinnedMap(pin, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer m.Close()
	keys := make([]K, batchChunk)
	vals := make([]V, batchChunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			each(keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", filepath.Base(pin), err)
		}
	}
}

// mapMemory is the kernel memory (memlock) of every map pinned under
// pinDir/maps, and the services' Maglev tables (inner maps, not pinned:
// `xlane status`'s services figure).
func mapMemory(pinDir string) (pinned uint64, err error) {
	dir := filepath.Join(pinDir, "maps")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, e.Name()), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			continue // a pinned program or link
		}
		info, err := m.Info()
		m.Close()
		if err != nil {
			return 0, err
		}
		if b, ok := info.Memlock(); ok {
			pinned += b
		}
	}
	return pinned, nil
}
