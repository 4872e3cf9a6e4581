package maglev

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
)

const (
	// DefaultM is the default table size: prime, and above 100·N for
	// services of up to 163 backends.
	DefaultM = 16381
	// MaxM bounds the table size; a table costs 4·M bytes in the datapath.
	MaxM = 1 << 24
)

// ErrNoActiveBackends is returned by Populate, together with a table of
// -1, when no backend has Weight > 0.
var ErrNoActiveBackends = errors.New("maglev: backends: no backend has weight > 0")

// Member is one member of a table: a service backend, named by a stable
// ID (the datapath uses the model.Backend's address).
type Member struct {
	// ID identifies the backend stably across changes, e.g.
	// "10.0.0.5:80/tcp". It seeds the backend's permutation, so the same
	// ID keeps (mostly) the same slots when other backends come and go.
	ID string
	// Weight is the backend's relative share of new flows. 0 means
	// draining: no slots, but existing connections stay (via conntrack).
	Weight uint32
}

// Table builds lookup tables of a fixed, prime size M.
type Table struct {
	m uint64
}

// New returns a Table of m slots. m must be prime and at most MaxM.
func New(m uint64) (*Table, error) {
	if m > MaxM {
		return nil, fmt.Errorf("maglev: m: %d exceeds the maximum table size %d", m, MaxM)
	}
	if !isPrime(m) {
		return nil, fmt.Errorf("maglev: m: %d is not prime", m)
	}
	return &Table{m: m}, nil
}

// M returns the number of slots.
func (t *Table) M() uint64 { return t.m }

// permutation is an active backend's walk over the slots and its place in
// the weighted turn order.
type permutation struct {
	index  int32  // index into the caller's backends slice
	next   uint64 // next slot to try: offset + j·skip mod M
	skip   uint64 // in [1, M-1]; M prime, so the walk visits every slot
	weight uint64
	credit uint64 // accumulated weight not yet spent on a slot
}

// advance moves p to the next slot of its permutation (next+skip mod M,
// without a division: both are below M).
func (p *permutation) advance(m uint64) {
	p.next += p.skip
	if p.next >= m {
		p.next -= m
	}
}

// Populate returns the lookup table for backends: slot → index into
// backends. See the package documentation for the guarantees.
func (t *Table) Populate(backends []Member) ([]int32, error) {
	m := t.m
	if uint64(len(backends)) > m {
		return nil, fmt.Errorf("maglev: backends: %d backends exceed the table size m=%d", len(backends), m)
	}
	order := make([]int, len(backends))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(backends[a].ID, backends[b].ID) })

	perms := make([]permutation, 0, len(backends))
	var wmax uint64
	for k, i := range order {
		b := backends[i]
		if b.ID == "" {
			return nil, fmt.Errorf("maglev: backends[%d]: empty ID", i)
		}
		if k > 0 && backends[order[k-1]].ID == b.ID {
			return nil, fmt.Errorf("maglev: backends[%d]: duplicate ID %q (also backends[%d])", i, b.ID, order[k-1])
		}
		if b.Weight == 0 {
			continue // draining: takes no turns, owns no slots
		}
		perms = append(perms, permutation{
			index:  int32(i),
			next:   hashOffset(b.ID) % m,
			skip:   hashSkip(b.ID)%(m-1) + 1,
			weight: uint64(b.Weight),
		})
		wmax = max(wmax, uint64(b.Weight))
	}

	slots := make([]int32, m)
	for s := range slots {
		slots[s] = -1
	}
	if len(perms) == 0 {
		return slots, ErrNoActiveBackends
	}

	// Invariant: filled == number of slots != -1. Every round the
	// backends with weight wmax claim a slot, so the loop terminates.
	for filled := uint64(0); ; {
		for i := range perms {
			p := &perms[i]
			p.credit += p.weight
			if p.credit < wmax {
				continue
			}
			p.credit -= wmax
			// Claim the next empty slot in p's permutation. Slots are
			// never freed, so p's skipped positions stay taken and
			// next only moves forward (at most M steps in total).
			for slots[p.next] >= 0 {
				p.advance(m)
			}
			slots[p.next] = p.index
			p.advance(m)
			if filled++; filled == m {
				return slots, nil
			}
		}
	}
}

// Salts that make hashOffset and hashSkip independent. Part of the
// datapath contract: changing them reshuffles every table.
const (
	offsetSalt = "xlane-maglev-offset\x00"
	skipSalt   = "xlane-maglev-skip\x00"
)

func hashOffset(id string) uint64 { return saltedHash(offsetSalt, id) }
func hashSkip(id string) uint64   { return saltedHash(skipSalt, id) }

// saltedHash is fmix64(FNV-1a-64(salt + id)).
func saltedHash(salt, id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(salt))
	h.Write([]byte(id))
	return fmix64(h.Sum64())
}

// fmix64 is the MurmurHash3 64-bit finalizer: every input bit affects
// every output bit, which FNV-1a alone does not provide for short keys.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// isPrime reports whether n is prime, by trial division (n ≤ MaxM).
func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
