package firewall

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sort"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/fqdn"
)

// bitset is one class: a bit per classifier bit (atom), lowest first.
type bitset [bpf.FwWords]uint64

func (b *bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b *bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }

// AddrEntry is one prefix of the addr LPM trie and its class.
type AddrEntry struct {
	Key   bpf.FwAddrKey
	Class uint32
}

// ExactEntry is one key of the exact hash and its class.
type ExactEntry struct {
	Key   bpf.FwExactKey
	Class uint32
}

// Tables is one compiled generation, as the maps of bpf/lib/fw.h hold it.
type Tables struct {
	Gen    bpf.FwGen
	Exact  []ExactEntry
	Addr   []AddrEntry
	Scalar []uint32 // FwScSize classes: ports, protocols, TCP flags
	Pool   []bitset // class -> bitmap; 0 is every bit
	Rules  []bpf.FwRule
	// Bit maps each classifier bit to its rule in the policy.
	Bit []int
	// Resolved are the rules with names (fw_rule.resolved), for
	// internal/fqdn.
	Resolved []fqdn.Rule
}

// atom is one classifier bit: a rule's match.
type atom struct {
	rule int
	m    *Match
}

// pool deduplicates class bitmaps.
type pool struct {
	ids  map[bitset]uint32
	list []bitset
}

func newPool() *pool {
	p := &pool{ids: map[bitset]uint32{}}
	var all bitset
	for i := range all {
		all[i] = ^uint64(0)
	}
	p.class(&all) // FW_CLASS_ALL
	return p
}

// scalarClass is class for the scalar arrays, where a value no rule's
// field contains is FW_CLASS_NONE: the datapath stops there.
func (p *pool) scalarClass(b *bitset) uint32 {
	if *b == (bitset{}) {
		return bpf.FwClassNone
	}
	return p.class(b)
}

func (p *pool) class(b *bitset) uint32 {
	if id, ok := p.ids[*b]; ok {
		return id
	}
	id := uint32(len(p.list))
	p.ids[*b] = id
	p.list = append(p.list, *b)
	return id
}

// Compile builds the tables of pol. slots gives every rule's counter slot
// by name (rules without one are refused: the caller allocates them).
func Compile(pol *Policy, slots map[string]uint32) (*Tables, error) {
	var atoms []atom
	t := &Tables{Scalar: make([]uint32, bpf.FwScSize)}
	firstBit := make([]int, len(pol.Rules)+1) // rule -> its first bit
	for i := range pol.Rules {
		r := &pol.Rules[i]
		slot, ok := slots[r.Name]
		if !ok {
			return nil, fmt.Errorf("compile: rule %q has no counter slot", r.Name)
		}
		firstBit[i] = len(t.Rules)
		if r.Names != nil {
			t.Resolved = append(t.Resolved, fqdn.Rule{Slot: slot, Name: r.Name, Names: r.Names, Src: sources(r.Matches)})
		}
		for j := range r.Matches {
			atoms = append(atoms, atom{i, &r.Matches[j]})
			t.Rules = append(t.Rules, bpf.FwRule{Slot: slot, Action: r.Action, IsDefault: b2u8(r.Default), Sample: r.Sample,
				Resolved: b2u8(r.Names != nil)})
			if r.Action == bpf.FwLog {
				t.Gen.LogRules++
			}
			t.Bit = append(t.Bit, i)
		}
	}
	firstBit[len(pol.Rules)] = len(t.Rules)
	if len(atoms) > bpf.FwMaxRules {
		return nil, fmt.Errorf("compile: %d classifier bits, at most %d", len(atoms), bpf.FwMaxRules)
	}
	// A pass rule's bits carry the bit the search goes on at (fw_rule's
	// pass_to, in the union with sample: a pass rule has no events).
	for bit := range t.Rules {
		if t.Rules[bit].Action == bpf.FwPass {
			t.Rules[bit].Sample = uint16(firstBit[pol.passTarget(t.Bit[bit])])
		}
	}
	pl := newPool()
	if pol.Established {
		t.Gen.Established = 1
	}
	t.Gen.Fields = 1 << bpf.FwFieldCtx
	compileCtx(t, pl, atoms)
	compileMAC(t, pl, atoms, bpf.FwFieldSMAC, func(m *Match) [][6]byte { return m.SMAC })
	compileMAC(t, pl, atoms, bpf.FwFieldDMAC, func(m *Match) [][6]byte { return m.DMAC })
	compileAddr(t, pl, atoms, bpf.FwFieldSrc, func(m *Match) ([]netip.Prefix, []netip.Prefix) { return m.Src4, m.Src6 })
	compileAddr(t, pl, atoms, bpf.FwFieldDst, func(m *Match) ([]netip.Prefix, []netip.Prefix) { return m.Dst4, m.Dst6 })
	compileProto(t, pl, atoms)
	compilePorts(t, pl, atoms, bpf.FwFieldSport, bpf.FwScSport, func(m *Match) []PortRange { return m.SPort })
	compilePorts(t, pl, atoms, bpf.FwFieldDport, bpf.FwScDport, func(m *Match) []PortRange { return m.DPort })
	compileFlags(t, pl, atoms)
	t.Pool = pl.list
	compileLin(t, atoms)
	if t.Gen.Lin == 0 {
		compileTuple4(t, atoms)
	}
	return t, nil
}

// sources are the source prefixes of matches, nil when one matches
// any source of a family.
func sources(ms []Match) []netip.Prefix {
	var out []netip.Prefix
	for _, m := range ms {
		if (m.V4 && m.Src4 == nil) || (m.V6 && m.Src6 == nil) {
			return nil
		}
		out = append(append(out, m.Src4...), m.Src6...)
	}
	return out
}

// compileTuple4 gives a set beyond the list whose uplink rules for IPv4
// are all of the shape "one protocol, one /32 source, one destination
// port" (lists: their cross product; nothing else restricted, no log rule
// or sampled events) the uplink's IPv4 tuple hash (bpf/lib/fw_lin.h): one
// exact-map key per (protocol, source, port), valued with the first bit
// that has it; a packet whose tuple is not there is decided by the first
// uplink default, which the generation names (Gen.Tuple4Miss). Defaults
// come after every rule in bit order and match every packet of their
// scope, so the first bit with the packet's tuple is the model's rule.
// Otherwise Gen.Tuple4 stays 0: the bitmaps decide.
func compileTuple4(t *Tables, atoms []atom) {
	type tuple struct {
		key bpf.FwExactKey
		bit uint32
	}
	var tuples []tuple
	seen := map[bpf.FwExactKey]bool{}
	miss := uint32(0)
	for i, a := range atoms {
		m := a.m
		if !m.V4 || !slices.ContainsFunc(m.Ctx, func(c Ctx) bool { return c.Kind == KindUplink && c.Net == 0 }) {
			continue // no IPv4 packet on the uplink matches it
		}
		r := t.Rules[i]
		// (An address list holds 0.0.0.0/0 for "any"; nil matches
		// nothing. A nil protocol or port list is "any".)
		if r.Action == bpf.FwLog || r.Action == bpf.FwPass || r.Sample != 0 || m.SMAC != nil || m.DMAC != nil || m.FlagsMask != 0 ||
			!anyPrefix(m.Dst4) || m.SPort != nil {
			return
		}
		if r.IsDefault != 0 {
			if !anyPrefix(m.Src4) || m.Proto != nil || m.DPort != nil {
				return
			}
			if miss == 0 {
				miss = uint32(i) + 1
			}
			continue
		}
		if miss != 0 || len(m.Src4) == 0 || len(m.Proto) == 0 || len(m.DPort) == 0 {
			return // a rule after a default, or one without the shape
		}
		for _, src := range m.Src4 {
			if src.Bits() != 32 {
				return
			}
			for _, p := range m.Proto {
				for _, dp := range m.DPort {
					if dp.Lo != dp.Hi || dp.Lo >= NoL4 {
						return
					}
					k := tuple4Key(p, src.Addr(), dp.Lo)
					if seen[k] {
						continue // an earlier bit has it
					}
					if len(tuples) == bpf.FwTuple4Max {
						return
					}
					seen[k] = true
					tuples = append(tuples, tuple{k, uint32(i)})
				}
			}
		}
	}
	if len(tuples) == 0 {
		return // no rule for IPv4 on the uplink: nothing to gain
	}
	for _, tp := range tuples {
		t.Exact = append(t.Exact, ExactEntry{tp.key, tp.bit})
	}
	t.Gen.Tuple4 = 1
	t.Gen.Tuple4Miss = miss
}

// anyPrefix: ps has a prefix of every address (/0).
func anyPrefix(ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Bits() == 0 })
}

// tuple4Key is the exact-map key of an IPv4 tuple (FW_EXACT_TUPLE4).
func tuple4Key(proto uint8, src netip.Addr, dport uint32) bpf.FwExactKey {
	k := bpf.FwExactKey{Field: bpf.FwExactTuple4, Kind: proto}
	a := src.As4()
	copy(k.Data[:4], a[:])
	binary.NativeEndian.PutUint16(k.Data[4:], uint16(dport))
	return k
}

// ClassifyTuple4 runs the uplink's IPv4 tuple hash the way
// bpf/lib/fw_lin.h does, for an IPv4 uplink packet of a set with
// Gen.Tuple4: the deciding bit, or -1 (allowed).
func (t *Tables) ClassifyTuple4(pk Packet) int {
	if pk.DPort != NoL4 {
		k := tuple4Key(pk.Proto, pk.Src, pk.DPort)
		bit := -1
		for _, e := range t.Exact {
			if e.Key == k {
				bit = int(e.Class) // the last one written, as in the map
			}
		}
		if bit >= 0 {
			return bit
		}
	}
	return int(t.Gen.Tuple4Miss) - 1
}

// compileLin lists the uplink's conjunctions for the list classifier
// (bpf/lib/fw_lin.h) when they fit: at most FwLinMax entries of one value
// per field, in bit order, no MACs, no log rules or sampled events (the
// list emits no events). Otherwise Gen.Lin stays 0: the bitmaps decide.
func compileLin(t *Tables, atoms []atom) {
	var lin []bpf.FwLin
	for i, a := range atoms {
		m := a.m
		if !slices.ContainsFunc(m.Ctx, func(c Ctx) bool { return c.Kind == KindUplink }) {
			continue
		}
		r := t.Rules[i]
		if r.Action == bpf.FwLog || r.Action == bpf.FwPass || r.Sample != 0 || m.SMAC != nil || m.DMAC != nil {
			return
		}
		protos := []int{-1}
		if m.Proto != nil {
			protos = protos[:0]
			for _, p := range m.Proto {
				protos = append(protos, int(p))
			}
		}
		sports, dports := linPorts(m.SPort), linPorts(m.DPort)
		for fam, on := range []bool{m.V4, m.V6} {
			if !on {
				continue
			}
			srcs, dsts := m.Src4, m.Dst4
			if fam == 1 {
				srcs, dsts = m.Src6, m.Dst6
			}
			n := len(srcs) * len(dsts) * len(protos) * len(sports) * len(dports)
			if len(lin)+n > bpf.FwLinMax {
				return
			}
			for _, src := range srcs {
				for _, dst := range dsts {
					for _, p := range protos {
						for _, sp := range sports {
							for _, dp := range dports {
								e := bpf.FwLin{
									SportLo: sp.Lo, SportHi: sp.Hi, DportLo: dp.Lo, DportHi: dp.Hi,
									Slot: r.Slot, Ip6: uint8(fam), FlagsMask: m.FlagsMask, FlagsComp: m.FlagsComp,
									Action: r.Action, IsDefault: r.IsDefault,
								}
								e.Src, e.SrcMask = linPrefix(src)
								e.Dst, e.DstMask = linPrefix(dst)
								if p < 0 {
									e.AnyProto = 1
								} else {
									e.Proto = uint8(p)
								}
								lin = append(lin, e)
							}
						}
					}
				}
			}
		}
	}
	t.Gen.Lin = uint32(len(lin)) + 1
	copy(t.Gen.LinRules[:], lin)
}

// linPorts is a port field's ranges for the list; no restriction is every
// class value, FW_NO_L4 included.
func linPorts(rs []PortRange) []PortRange {
	if rs == nil {
		return []PortRange{{Lo: 0, Hi: NoL4}}
	}
	return mergeRanges(rs)
}

// linPrefix is p as the list's words: the address as conntrack keys it
// (IPv4 as ::ffff:a.b.c.d), masked, and the mask.
func linPrefix(p netip.Prefix) (addr, mask [4]uint32) {
	a := p.Addr().As16() // IPv4: v4-mapped
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	var m [16]byte
	for i := 0; i < bits; i++ {
		m[i/8] |= 1 << (7 - i%8)
	}
	for i := range 4 {
		mask[i] = binary.NativeEndian.Uint32(m[4*i:])
		addr[i] = binary.NativeEndian.Uint32(a[4*i:]) & mask[i]
	}
	return addr, mask
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// compileCtx: (kind, network) -> atoms of that kind for every network or
// for this one; (kind, 0) -> atoms for every network.
func compileCtx(t *Tables, pl *pool, atoms []atom) {
	nets := map[Kind]map[uint32]bool{}
	for _, a := range atoms {
		for _, c := range a.m.Ctx {
			if nets[c.Kind] == nil {
				nets[c.Kind] = map[uint32]bool{0: true}
			}
			nets[c.Kind][c.Net] = true
		}
	}
	// The uplink's class rides in the generation (gen.any_class[FW_F_CTX],
	// bpf/lib/abi.h): the uplink has no network, and the datapath skips
	// the hash lookup of its (kind, 0) key.
	t.Gen.AnyClass[bpf.FwFieldCtx] = bpf.FwCtxNoUplink
	kinds := make([]Kind, 0, len(nets))
	for k := range nets {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		ids := make([]uint32, 0, len(nets[k]))
		for n := range nets[k] {
			ids = append(ids, n)
		}
		slices.Sort(ids)
		for _, n := range ids {
			var b bitset
			for i, a := range atoms {
				if slices.ContainsFunc(a.m.Ctx, func(c Ctx) bool { return c.Kind == k && (c.Net == 0 || c.Net == n) }) {
					b.set(i)
				}
			}
			key := bpf.FwExactKey{Field: bpf.FwFieldCtx, Kind: uint8(k)}
			binary.NativeEndian.PutUint32(key.Data[:4], n)
			cls := pl.class(&b)
			if k == KindUplink && n == 0 {
				t.Gen.AnyClass[bpf.FwFieldCtx] = cls + 1
			}
			t.Exact = append(t.Exact, ExactEntry{key, cls})
		}
	}
}

func compileMAC(t *Tables, pl *pool, atoms []atom, field uint8, get func(*Match) [][6]byte) {
	values := map[[6]byte]bool{}
	for _, a := range atoms {
		for _, v := range get(a.m) {
			values[v] = true
		}
	}
	if len(values) == 0 {
		return
	}
	t.Gen.Fields |= 1 << field
	var anyB bitset
	for i, a := range atoms {
		if get(a.m) == nil {
			anyB.set(i)
		}
	}
	t.Gen.AnyClass[field] = pl.class(&anyB)
	keys := make([][6]byte, 0, len(values))
	for v := range values {
		keys = append(keys, v)
	}
	slices.SortFunc(keys, func(a, b [6]byte) int { return slices.Compare(a[:], b[:]) })
	for _, v := range keys {
		b := anyB
		for i, a := range atoms {
			if slices.Contains(get(a.m), v) {
				b.set(i)
			}
		}
		key := bpf.FwExactKey{Field: field}
		copy(key.Data[:], v[:])
		t.Exact = append(t.Exact, ExactEntry{key, pl.class(&b)})
	}
}

// trie is a binary trie of prefixes, for the classes of nested prefixes.
type trie struct {
	child [2]*trie
	atoms []int // atoms naming exactly this prefix
	real  bool  // some atom names it
}

func (n *trie) insert(p netip.Prefix, atom int) {
	a := p.Addr().AsSlice()
	for i := 0; i < p.Bits(); i++ {
		b := a[i/8] >> (7 - i%8) & 1
		if n.child[b] == nil {
			n.child[b] = &trie{}
		}
		n = n.child[b]
	}
	n.real = true
	if len(n.atoms) == 0 || n.atoms[len(n.atoms)-1] != atom {
		n.atoms = append(n.atoms, atom)
	}
}

func compileAddr(t *Tables, pl *pool, atoms []atom, field uint8, get func(*Match) ([]netip.Prefix, []netip.Prefix)) {
	used := false
	for _, a := range atoms {
		p4, p6 := get(a.m)
		if !(len(p4) == 1 && p4[0].Bits() == 0 && len(p6) == 1 && p6[0].Bits() == 0) {
			used = true
			break
		}
	}
	if !used {
		return
	}
	t.Gen.Fields |= 1 << field
	for fam := 0; fam < 2; fam++ {
		root := &trie{}
		for i, a := range atoms {
			p4, p6 := get(a.m)
			ps := p4
			if fam == 1 {
				ps = p6
			}
			for _, p := range ps {
				root.insert(p, i)
			}
		}
		width := 32
		kfield := field
		if fam == 1 {
			width, kfield = 128, field|bpf.FwAddrV6
		}
		var walk func(n *trie, path []byte, depth int, acc bitset)
		walk = func(n *trie, path []byte, depth int, acc bitset) {
			for _, i := range n.atoms {
				acc.set(i)
			}
			if n.real {
				key := bpf.FwAddrKey{Prefixlen: uint32(8 + depth), Field: kfield}
				copy(key.Addr[:width/8], path)
				t.Addr = append(t.Addr, AddrEntry{key, pl.class(&acc)})
			}
			for b := 0; b < 2; b++ {
				if c := n.child[b]; c != nil {
					next := slices.Clone(path)
					if b == 1 {
						next[depth/8] |= 1 << (7 - depth%8)
					}
					walk(c, next, depth+1, acc)
				}
			}
		}
		walk(root, make([]byte, width/8), 0, bitset{})
	}
}

func compileProto(t *Tables, pl *pool, atoms []atom) {
	if !slices.ContainsFunc(atoms, func(a atom) bool { return a.m.Proto != nil }) {
		return
	}
	t.Gen.Fields |= 1 << bpf.FwFieldProto
	for v := 0; v < 256; v++ {
		var b bitset
		for i, a := range atoms {
			if a.m.Proto == nil || slices.Contains(a.m.Proto, uint8(v)) {
				b.set(i)
			}
		}
		t.Scalar[bpf.FwScProto+uint32(v)] = pl.scalarClass(&b)
	}
}

func compileFlags(t *Tables, pl *pool, atoms []atom) {
	if !slices.ContainsFunc(atoms, func(a atom) bool { return a.m.FlagsMask != 0 }) {
		return
	}
	t.Gen.Fields |= 1 << bpf.FwFieldFlags
	for v := 0; v < 256; v++ {
		var b bitset
		for i, a := range atoms {
			if uint8(v)&a.m.FlagsMask == a.m.FlagsComp {
				b.set(i)
			}
		}
		t.Scalar[bpf.FwScFlags+uint32(v)] = pl.scalarClass(&b)
	}
}

// compilePorts splits the port space (0-65535 and NoL4) into elementary
// intervals at every range boundary: one class per interval.
func compilePorts(t *Tables, pl *pool, atoms []atom, field uint8, base uint32, get func(*Match) []PortRange) {
	if !slices.ContainsFunc(atoms, func(a atom) bool { return get(a.m) != nil }) {
		return
	}
	t.Gen.Fields |= 1 << field
	type event struct {
		at   uint32
		atom int
		add  bool
	}
	var evs []event
	var cur bitset
	for i, a := range atoms {
		rs := get(a.m)
		if rs == nil {
			cur.set(i)
			continue
		}
		for _, r := range mergeRanges(rs) {
			evs = append(evs, event{r.Lo, i, true}, event{r.Hi + 1, i, false})
		}
	}
	sort.Slice(evs, func(a, b int) bool { return evs[a].at < evs[b].at })
	const end = NoL4 + 1
	at := uint32(0)
	for k := 0; at < end; {
		for k < len(evs) && evs[k].at == at {
			if evs[k].add {
				cur[evs[k].atom/64] |= 1 << (evs[k].atom % 64)
			} else {
				cur[evs[k].atom/64] &^= 1 << (evs[k].atom % 64)
			}
			k++
		}
		next := uint32(end)
		if k < len(evs) && evs[k].at < next {
			next = evs[k].at
		}
		if next > NoL4 {
			next = NoL4 // NoL4 is in no range: its own interval
		}
		if at == NoL4 {
			next = end
		}
		c := pl.scalarClass(&cur)
		for v := at; v < next; v++ {
			t.Scalar[base+v] = c
		}
		at = next
	}
}

// mergeRanges sorts and joins overlapping or adjacent ranges, so that
// adding and removing at the boundaries toggles each atom once.
func mergeRanges(rs []PortRange) []PortRange {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b PortRange) int { return int(a.Lo) - int(b.Lo) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && r.Lo <= merged[n-1].Hi+1 {
			if r.Hi > merged[n-1].Hi {
				merged[n-1].Hi = r.Hi
			}
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// Bits converts a class to the map value, with its summary.
func (b *bitset) Bits() bpf.FwBits {
	var out bpf.FwBits
	out.W = *b
	for i, w := range b {
		if w != 0 {
			out.Sum[i/64] |= 1 << (i % 64)
		}
	}
	return out
}

// Classify runs the tables the way bpf/lib/fw.h does (lookups, AND of the
// summaries, then of the candidate words, lowest bit first), for tests
// that check the compiler against Evaluate without a kernel. It returns
// the deciding bit or -1, and the log bits met on the way.
func (t *Tables) Classify(pk Packet) (decides int, logged []int) {
	cls := [bpf.FwFieldMax]uint32{}
	exact := map[bpf.FwExactKey]uint32{}
	for _, e := range t.Exact {
		exact[e.Key] = e.Class
	}
	key := bpf.FwExactKey{Field: bpf.FwFieldCtx, Kind: uint8(pk.Kind)}
	binary.NativeEndian.PutUint32(key.Data[:4], pk.Net)
	c, ok := exact[key]
	if !ok {
		key.Data = [6]uint8{}
		if c, ok = exact[key]; !ok {
			return -1, nil
		}
	}
	cls[bpf.FwFieldCtx] = c
	for _, f := range []struct {
		field uint8
		mac   [6]byte
	}{{bpf.FwFieldSMAC, pk.SMAC}, {bpf.FwFieldDMAC, pk.DMAC}} {
		if t.Gen.Fields&(1<<f.field) == 0 {
			continue
		}
		k := bpf.FwExactKey{Field: f.field, Data: f.mac}
		if c, ok := exact[k]; ok {
			cls[f.field] = c
		} else {
			cls[f.field] = t.Gen.AnyClass[f.field]
		}
	}
	for _, f := range []struct {
		field uint8
		a     netip.Addr
	}{{bpf.FwFieldSrc, pk.Src}, {bpf.FwFieldDst, pk.Dst}} {
		if t.Gen.Fields&(1<<f.field) == 0 {
			continue
		}
		c, ok := t.lpm(f.field, f.a)
		if !ok {
			return -1, nil
		}
		cls[f.field] = c
	}
	if t.Gen.Fields&(1<<bpf.FwFieldProto) != 0 {
		cls[bpf.FwFieldProto] = t.Scalar[bpf.FwScProto+uint32(pk.Proto)]
	}
	if t.Gen.Fields&(1<<bpf.FwFieldSport) != 0 {
		cls[bpf.FwFieldSport] = t.Scalar[bpf.FwScSport+pk.SPort]
	}
	if t.Gen.Fields&(1<<bpf.FwFieldDport) != 0 {
		cls[bpf.FwFieldDport] = t.Scalar[bpf.FwScDport+pk.DPort]
	}
	if t.Gen.Fields&(1<<bpf.FwFieldFlags) != 0 {
		cls[bpf.FwFieldFlags] = t.Scalar[bpf.FwScFlags+uint32(pk.Flags)]
	}
	var and bitset
	for i := range and {
		and[i] = ^uint64(0)
	}
	for _, f := range []uint8{bpf.FwFieldProto, bpf.FwFieldSport, bpf.FwFieldDport, bpf.FwFieldFlags} {
		if cls[f] == bpf.FwClassNone {
			return -1, nil // no rule has the value: nothing to search
		}
	}
	for _, c := range cls {
		for i := range and {
			and[i] &= t.Pool[c][i]
		}
	}
	from := 0 // a pass rule's target: bits below it are skipped
	for i, w := range and {
		for w != 0 {
			bit := i*64 + bits.TrailingZeros64(w)
			w &= w - 1
			if bit < from {
				continue
			}
			if bit >= len(t.Rules) {
				return -1, logged
			}
			switch t.Rules[bit].Action {
			case bpf.FwLog:
				logged = append(logged, bit)
				continue
			case bpf.FwPass:
				from = int(t.Rules[bit].Sample)
				continue
			}
			if t.Rules[bit].Resolved != 0 {
				continue // nothing resolved here (Policy.Evaluate without Resolved)
			}
			return bit, logged
		}
	}
	return -1, logged
}

func (t *Tables) lpm(field uint8, a netip.Addr) (uint32, bool) {
	best, found := -1, uint32(0)
	var want bpf.FwAddrKey
	want.Field = field
	width := 32
	if a.Is4() {
		b := a.As4()
		copy(want.Addr[:4], b[:])
	} else {
		want.Field |= bpf.FwAddrV6
		want.Addr = a.As16()
		width = 128
	}
	for _, e := range t.Addr {
		if e.Key.Field != want.Field {
			continue
		}
		n := int(e.Key.Prefixlen) - 8
		if n > width || n <= best {
			continue
		}
		if prefixMatch(e.Key.Addr[:], want.Addr[:], n) {
			best, found = n, e.Class
		}
	}
	return found, best >= 0
}

func prefixMatch(p, a []byte, n int) bool {
	for i := 0; i < n; i++ {
		if (p[i/8]>>(7-i%8))&1 != (a[i/8]>>(7-i%8))&1 {
			return false
		}
	}
	return true
}
