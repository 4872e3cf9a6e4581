package firewall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// Installer writes compiled generations into the firewall's maps.
// Callers serialise its use (the daemon's lock).
type Installer struct {
	m                                bpf.FwMaps
	exact, addr, scalar, pool, rules *ebpf.MapSpec
}

// NewInstaller returns an installer for the maps m.
func NewInstaller(m bpf.FwMaps) (*Installer, error) {
	in := &Installer{m: m}
	var err error
	in.exact, in.addr, in.scalar, in.pool, in.rules, err = bpf.FwInnerSpecs()
	if err != nil {
		return nil, fmt.Errorf("firewall inner map specs: %w", err)
	}
	return in, nil
}

func (in *Installer) newInner(spec *ebpf.MapSpec, name string, entries int) (*ebpf.Map, error) {
	s := spec.Copy()
	s.Name = name
	s.Pinning = ebpf.PinNone
	if entries < 1 {
		entries = 1
	}
	s.MaxEntries = uint32(entries)
	m, err := ebpf.NewMap(s)
	if err != nil {
		return nil, fmt.Errorf("create %s map (%d entries): %w", name, entries, err)
	}
	return m, nil
}

// State returns the firewall's live state.
func (in *Installer) State() (bpf.FwState, error) {
	var st bpf.FwState
	err := in.m.State.Lookup(uint32(0), &st)
	return st, err
}

// Install makes t the live rule set: it builds the generation's maps, puts
// them into the idle slot, flips xlane_fw_state.active (one map update:
// packets see the old set or the new one, never a mix), waits until no
// packet can still be using the old slot, and frees it. An error before
// the flip leaves the live set untouched. Returns the generation number.
func (in *Installer) Install(t *Tables) (uint64, error) {
	st, err := in.State()
	if err != nil {
		return 0, fmt.Errorf("read firewall state: %w", err)
	}
	idle := 1 - st.Active&1
	var inner []*ebpf.Map
	defer func() {
		for _, m := range inner {
			m.Close()
		}
	}()
	mk := func(spec *ebpf.MapSpec, name string, n int) (*ebpf.Map, error) {
		m, err := in.newInner(spec, name, n)
		if err == nil {
			inner = append(inner, m)
		}
		return m, err
	}
	exact, err := mk(in.exact, "xlane_fw_exact", len(t.Exact))
	if err != nil {
		return 0, err
	}
	for _, e := range t.Exact {
		if err := exact.Put(e.Key, e.Class); err != nil {
			return 0, fmt.Errorf("fill exact map: %w", err)
		}
	}
	addr, err := mk(in.addr, "xlane_fw_addr", len(t.Addr))
	if err != nil {
		return 0, err
	}
	for _, e := range t.Addr {
		if err := addr.Put(e.Key, e.Class); err != nil {
			return 0, fmt.Errorf("fill address trie: %w", err)
		}
	}
	scalar, err := mk(in.scalar, "xlane_fw_scalar", int(bpf.FwScSize))
	if err != nil {
		return 0, err
	}
	if err := batchFill(scalar, t.Scalar); err != nil {
		return 0, fmt.Errorf("fill scalar map: %w", err)
	}
	pool, err := mk(in.pool, "xlane_fw_pool", len(t.Pool))
	if err != nil {
		return 0, err
	}
	bitmaps := make([]bpf.FwBits, len(t.Pool))
	for i := range t.Pool {
		bitmaps[i] = t.Pool[i].Bits()
	}
	if err := batchFill(pool, bitmaps); err != nil {
		return 0, fmt.Errorf("fill bitmap pool: %w", err)
	}
	rules, err := mk(in.rules, "xlane_fw_rules", bpf.FwMaxRules) // fixed size: inlined lookups
	if err != nil {
		return 0, err
	}
	if err := batchFill(rules, t.Rules); err != nil {
		return 0, fmt.Errorf("fill rules map: %w", err)
	}

	outer := []struct {
		m     *ebpf.Map
		inner *ebpf.Map
	}{{in.m.Exact, exact}, {in.m.Addr, addr}, {in.m.Scalar, scalar}, {in.m.Pool, pool}, {in.m.Rules, rules}}
	for _, o := range outer {
		if err := o.m.Put(idle, o.inner); err != nil {
			in.clearSlot(idle)
			return 0, fmt.Errorf("install generation into slot %d: %w", idle, err)
		}
	}
	if err := putGen(in.m.Gens, idle, t.Gen); err != nil {
		in.clearSlot(idle)
		return 0, fmt.Errorf("install generation header: %w", err)
	}
	next := bpf.FwState{Active: idle, On: 1, Generation: st.Generation + 1}
	if err := in.m.State.Put(uint32(0), next); err != nil {
		in.clearSlot(idle)
		return 0, fmt.Errorf("switch to the new generation: %w", err)
	}
	// From here on the new set is live. Free the old one once no packet
	// can hold it.
	if st.On != 0 {
		waitForReaders()
		in.clearSlot(st.Active & 1)
	}
	return next.Generation, nil
}

// Disable turns the stage off (every hook allows, as with no rule set)
// and frees both generations.
func (in *Installer) Disable() error {
	st, err := in.State()
	if err != nil {
		return fmt.Errorf("read firewall state: %w", err)
	}
	st.On = 0
	st.Generation++
	if err := in.m.State.Put(uint32(0), st); err != nil {
		return fmt.Errorf("turn the firewall off: %w", err)
	}
	waitForReaders()
	in.clearSlot(0)
	in.clearSlot(1)
	return nil
}

// putGen writes gen at slot. A generation header only grows at its end,
// and programs read their prefix of it: the xlane_fw_gens of an older
// object file (BenchmarkCompareFirewall's old objects) gets the prefix
// its value holds.
func putGen(m *ebpf.Map, slot uint32, gen bpf.FwGen) error {
	b, err := binary.Append(nil, binary.NativeEndian, gen)
	if err != nil {
		return err
	}
	if n := int(m.ValueSize()); n < len(b) {
		b = b[:n]
	}
	return m.Put(slot, b)
}

func (in *Installer) clearSlot(slot uint32) {
	for _, m := range []*ebpf.Map{in.m.Exact, in.m.Addr, in.m.Scalar, in.m.Pool, in.m.Rules} {
		m.Delete(slot) // an empty slot is fine
	}
}

// batchFill writes values[i] at key i of an array map.
func batchFill[T any](m *ebpf.Map, values []T) error {
	if len(values) == 0 {
		return nil
	}
	keys := make([]uint32, len(values))
	for i := range keys {
		keys[i] = uint32(i)
	}
	const chunk = 4096
	for lo := 0; lo < len(values); lo += chunk {
		hi := min(lo+chunk, len(values))
		if _, err := m.BatchUpdate(keys[lo:hi], values[lo:hi], nil); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return err
			}
			for i := lo; i < hi; i++ {
				if err := m.Put(keys[i], values[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// membarrierCmdGlobal is MEMBARRIER_CMD_GLOBAL: it returns after an RCU
// grace period (synchronize_rcu), so no BPF program that may have read
// the old xlane_fw_state is still running.
const membarrierCmdGlobal = 1

// waitForReaders waits until every program run that started before the
// flip has ended. XDP and tc programs run inside RCU read-side sections.
func waitForReaders() {
	if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0); errno != 0 {
		// nohz_full kernels refuse it: a program run is microseconds.
		time.Sleep(100 * time.Millisecond)
	}
}

// Counter is a rule's counters, summed over CPUs.
type Counter struct {
	Packets, Bytes uint64
	LastHit        uint64 // bpf_ktime_get_coarse_ns(), 0: never
}

// RuleSlot is a rule's counter slot and action (the metrics' rule rows).
type RuleSlot struct {
	Slot   uint32
	Action string
}

// Counter reads the counters of a slot.
func (in *Installer) Counter(slot uint32) (Counter, error) {
	var per []bpf.FwCounter
	if err := in.m.Counters.Lookup(slot, &per); err != nil {
		return Counter{}, err
	}
	var c Counter
	for _, v := range per {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
		c.LastHit = max(c.LastHit, v.LastHit)
	}
	return c, nil
}

// ResetCounter zeroes a slot's counters (before a new rule takes it).
func (in *Installer) ResetCounter(slot uint32) error {
	zero := make([]bpf.FwCounter, ebpf.MustPossibleCPU())
	return in.m.Counters.Put(slot, zero)
}

// SetDDoS writes the uplink's DDoS limits.
func (in *Installer) SetDDoS(c bpf.FwDdos) error { return in.m.DDoS.Put(uint32(0), c) }

// DDoS reads them.
func (in *Installer) DDoS() (bpf.FwDdos, error) {
	var c bpf.FwDdos
	err := in.m.DDoS.Lookup(uint32(0), &c)
	return c, err
}

// blockKey returns the blocklist map and key of p.
func (in *Installer) blockKey(p netip.Prefix) (*ebpf.Map, any) {
	p = p.Masked()
	if p.Addr().Is4() {
		return in.m.Block4, bpf.FwBlock4Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As4()}
	}
	return in.m.Block6, bpf.FwBlock6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
}

// Block adds prefixes to the uplink's blocklist.
func (in *Installer) Block(ps []netip.Prefix) error {
	var k4 []bpf.FwBlock4Key
	var k6 []bpf.FwBlock6Key
	for _, p := range ps {
		switch k := func() any { _, k := in.blockKey(p); return k }().(type) {
		case bpf.FwBlock4Key:
			k4 = append(k4, k)
		case bpf.FwBlock6Key:
			k6 = append(k6, k)
		}
	}
	if err := batchPut(in.m.Block4, k4); err != nil {
		return fmt.Errorf("fill IPv4 blocklist: %w", err)
	}
	if err := batchPut(in.m.Block6, k6); err != nil {
		return fmt.Errorf("fill IPv6 blocklist: %w", err)
	}
	return nil
}

// Unblock removes prefixes from the blocklist (missing ones are fine).
func (in *Installer) Unblock(ps []netip.Prefix) error {
	for _, p := range ps {
		m, k := in.blockKey(p)
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("unblock %s: %w", p, err)
		}
	}
	return nil
}

// FlushBlocklist empties both blocklists.
func (in *Installer) FlushBlocklist() error {
	for _, m := range []*ebpf.Map{in.m.Block4, in.m.Block6} {
		var keys [][]byte
		it := m.Iterate()
		k := make([]byte, m.KeySize())
		var v uint32
		for it.Next(&k, &v) {
			keys = append(keys, append([]byte(nil), k...))
		}
		if err := it.Err(); err != nil {
			return err
		}
		for _, k := range keys {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
		}
	}
	return nil
}

func batchPut[K any](m *ebpf.Map, keys []K) error {
	const chunk = 8192
	for lo := 0; lo < len(keys); lo += chunk {
		hi := min(lo+chunk, len(keys))
		vals := make([]uint32, hi-lo)
		for i := range vals {
			vals[i] = 1
		}
		if _, err := m.BatchUpdate(keys[lo:hi], vals, nil); err != nil {
			for i := lo; i < hi; i++ {
				if err := m.Put(keys[i], uint32(1)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
