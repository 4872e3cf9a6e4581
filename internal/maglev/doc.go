// Package maglev builds Maglev consistent-hashing lookup tables (Eisenbud et
// al., "Maglev: A Fast and Reliable Software Network Load Balancer", NSDI
// 2016, section 3.4) for xlane's L4 service load balancer.
//
// # Contract
//
// For every service the BPF datapath holds a table of M slots, M prime. A
// slot holds an index into the service's backend list; a flow's 5-tuple
// hash (computed in BPF) mod M picks the slot, so all packets of a flow,
// on every node, reach the same backend as long as the table is the same.
//
//	t, err := maglev.New(maglev.DefaultM) // M must be prime, 2 ≤ M ≤ MaxM
//	slots, err := t.Populate(backends)    // len(slots) == M
//	// slots[s] is an index into backends (the caller's slice, in the
//	// caller's order), or -1 in every slot if no backend has Weight > 0.
//
// Populate guarantees:
//
//   - Determinism: the table depends only on the set of (ID, Weight)
//     pairs, not on the order of backends. Backends are sorted by ID
//     (byte-wise) before the table is built, and the returned indices are
//     mapped back to the caller's slice. Hashes are fixed (below), so the
//     same input yields the same table across processes, nodes, daemon
//     restarts and releases; changing the hash or the fill order is a
//     breaking change to the datapath and the golden tests pin both.
//   - Balance: with equal weights every active backend owns ⌊M/N⌋ or
//     ⌈M/N⌉ slots. With weights, backend i owns about M·wᵢ/Σw slots (to
//     within about one slot). The paper recommends M > 100·N to keep the
//     imbalance in hash space under 1 %.
//   - Draining: a backend with Weight 0 owns no slots. It remains a valid
//     backend for established connections, which the datapath keeps via
//     conntrack; the table only decides where new flows go. Draining a
//     backend gives every slot the same owner as removing it would.
//   - Low disruption: when a backend is removed, its slots are reassigned
//     and some other slots change owner as well: Maglev favours balance
//     over minimal disruption (paper, section 3.4) and gives no bound.
//     Measured with M=16381, N=10..100, removing each backend in turn:
//     the extra churn is 0.5–1.4 % of M on average, 1.5 % at p99 and
//     3.4 % at worst (two backends with related skips). An added backend
//     takes ⌊M/(N+1)⌋ or ⌈M/(N+1)⌉ slots and moves a similar extra
//     fraction. Churn shrinks as M/N grows; maglev_test.go enforces the
//     bounds.
//
// Errors: New rejects an M that is not prime or out of range. Populate
// rejects more backends than slots, empty or duplicate IDs, and returns a
// table of -1 together with ErrNoActiveBackends when no backend has
// Weight > 0 (an empty list included), so a caller may still install it
// to make the datapath reject new flows.
//
// A Table holds no mutable state; it is safe for concurrent use.
//
// # Algorithm
//
// Each active backend i gets a permutation of the slots,
//
//	permutation[i][j] = (offsetᵢ + j·skipᵢ) mod M,  j = 0, 1, …, M-1
//	offsetᵢ = h₁(IDᵢ) mod M
//	skipᵢ   = h₂(IDᵢ) mod (M-1) + 1
//
// which visits every slot exactly once because M is prime and
// 1 ≤ skipᵢ < M. Backends then take turns in ID order; on its turn a
// backend claims the next slot in its permutation that is still empty.
// The fill stops when all M slots are claimed.
//
// Weighted Maglev: turns are rationed by a credit counter (smooth
// weighted round-robin). At the start of each round every backend adds
// its weight to its credit; a backend whose credit reaches wmax (the
// largest weight) claims one slot and pays wmax. The heaviest backends
// claim a slot every round, a backend with half that weight every other
// round, and so on, so after R rounds backend i has claimed ⌊R·wᵢ/wmax⌋
// slots — proportional to its weight. With equal weights every backend
// claims every round and this is the paper's unweighted algorithm.
// Because some backend claims a slot in every round, the fill always
// terminates.
//
// # Hashes
//
// h₁ and h₂ are FNV-1a 64 (hash/fnv; offset basis 14695981039346656037,
// prime 1099511628211) of a fixed salt followed by the ID bytes, passed
// through the MurmurHash3 64-bit finalizer (fmix64) so that IDs differing
// in a single byte ("10.0.0.5:80/tcp", "10.0.0.6:80/tcp") get unrelated
// offsets and skips:
//
//	h₁(id) = fmix64(FNV-1a-64("xlane-maglev-offset\x00" + id))
//	h₂(id) = fmix64(FNV-1a-64("xlane-maglev-skip\x00" + id))
//
// The two salts make h₁ and h₂ independent hashes of the same ID.
package maglev
