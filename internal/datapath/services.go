package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/maglev"
	"github.com/xlane-dev/xlane/internal/model"
)

// Services are model.Service values: the datapath encodes them here. A
// service's VIP, port and protocol key xlane_services (its ID, Maglev
// size and affinity the value); its backends are xlane_backends entries
// by (ID, index), a weight 0 one flagged draining; its Maglev table of
// backend indices is an inner map of xlane_maglev. With Affinity, a
// client's new flows go to one backend: the one its last new flow got
// when that was less than the effective affinity timeout ago and the
// backend still takes new flows (xlane_affinity), else the client
// address's Maglev slot.

func serviceKey(s *model.Service) bpf.ServiceKey {
	return bpf.ServiceKey{Addr: s.VIP.Addr().As16(), Port: htons(s.VIP.Port()), Proto: protoNumber(s.Proto)}
}

// protoNumber is a model protocol name's IP protocol number.
func protoNumber(p string) uint8 {
	if p == "udp" {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}

// MaglevSize is the slots of every service table of this datapath, 0
// when each service gets a size for its backends (maglevSizeFor).
func (d *BPF) MaglevSize() uint32 { return d.maglevSize }

// maglevSizeFor is the table size for a service of n backends: the
// smallest prime at least 100·n (Maglev gives every backend ⌊M/N⌋ or
// ⌈M/N⌉ slots, so shares differ by at most N/M: 1 %), at least 251, at
// most maglevMaxSize (shares then differ by more, above 655 backends).
// A table is an array of 8-byte slots (the kernel rounds 4-byte values
// up): 307 slots for 3 backends fit a 4 KiB allocation with the map's
// header.
func (d *BPF) maglevSizeFor(n int) uint32 {
	if d.maglevSize != 0 {
		return d.maglevSize
	}
	m := max(uint64(maglevMinSize), 100*uint64(n))
	for ; m < maglevMaxSize && !isPrime(m); m++ {
	}
	return uint32(min(m, maglevMaxSize))
}

const (
	maglevMinSize = 251
	maglevMaxSize = 65521 // XL_MAGLEV_MAX, prime
)

func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for p := uint64(2); p*p <= n; p++ {
		if n%p == 0 {
			return false
		}
	}
	return true
}

// svcPlan is one service of a PutServices call, prepared.
type svcPlan struct {
	s       *model.Service
	size    uint32
	slots   []uint32
	oldSize uint32    // 0: a new service (or one programmed before this daemon started: see below)
	inner   *ebpf.Map // a new table (new service or new size), nil: rewrite the table in place
}

// PutService programs (or reprograms) a service; see PutServices.
func (d *BPF) PutService(s model.Service) error { return d.PutServices([]model.Service{s}) }

// PutServices programs (or reprograms) services, batched: a table per new
// service (or per new size) is built aside and installed with one batch
// update of xlane_maglev for all of them (each single update of a hash of
// maps waits for an RCU grace period, milliseconds; a batch waits once);
// a reprogrammed service of the same size gets its slots rewritten in
// place, one batch call, which needs no wait. Services, backends: one
// batch update each. Flows already tracked keep their backend whatever the
// table says. On error, what was applied stays: the caller puts back the
// old services or deletes the new ones.
func (d *BPF) PutServices(svcs []model.Service) error {
	// In chunks: every new table is a file descriptor until installed,
	// and a chunk costs one RCU wait.
	chunk := putChunkFor()
	for len(svcs) > 0 {
		n := min(len(svcs), chunk)
		if err := d.putServices(svcs[:n]); err != nil {
			return err
		}
		svcs = svcs[n:]
	}
	return nil
}

// putChunk is how many services PutServices programs per batch at most.
const putChunk = 4096

// putChunkFor is putChunk, or a quarter of the open-files limit where that
// is lower: each table of a chunk holds a descriptor until installed, and
// a daemon started with the kernel's default hard limit of 4,096 (as in
// the kernel matrix's guests, or a unit file's LimitNOFILE) ran out of
// them (EMFILE, which cilium/ebpf reports as "inner maps not supported").
func putChunkFor() int {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur >= 4*putChunk {
		return putChunk
	}
	return max(16, int(r.Cur/4))
}

func (d *BPF) putServices(svcs []model.Service) error {
	plans := make([]svcPlan, len(svcs))
	defer func() {
		for _, p := range plans {
			if p.inner != nil {
				p.inner.Close()
			}
		}
	}()
	var bkeys []bpf.BackendKey
	var bvals []bpf.BackendVal
	for i := range svcs {
		s := &svcs[i]
		p := &plans[i]
		p.s, p.size = s, d.maglevSizeFor(len(s.Backends))
		p.oldSize = d.programmedSize(s)
		if p.oldSize != 0 && p.oldSize >= 100*uint32(len(s.Backends)) && p.oldSize <= 4*p.size {
			// Still fit for the backends: keep the size, so that a
			// backend change rewrites the table in place (and moves
			// only the slots Maglev moves).
			p.size = p.oldSize
		}
		tbl, err := maglev.New(uint64(p.size))
		if err != nil {
			return err
		}
		bs := make([]maglev.Member, len(s.Backends))
		for j, b := range s.Backends {
			bs[j] = maglev.Member{ID: b.Addr.String(), Weight: b.Weight}
		}
		slots, err := tbl.Populate(bs)
		if err != nil && !errors.Is(err, maglev.ErrNoActiveBackends) {
			return fmt.Errorf("service %s: %w", s.VIP, err)
		}
		p.slots = make([]uint32, len(slots))
		for j, b := range slots {
			p.slots[j] = uint32(b)
		}
		if p.oldSize != p.size {
			if p.inner, err = ebpf.NewMap(bpf.MaglevInnerSpec(p.size)); err != nil {
				return fmt.Errorf("service %s: maglev table: %w", s.VIP, err)
			}
			if err := fillSlots(p.inner, p.slots); err != nil {
				return fmt.Errorf("service %s: fill maglev table: %w", s.VIP, err)
			}
		}
		for j, b := range s.Backends {
			bkeys = append(bkeys, bpf.BackendKey{Service: s.ID, Index: uint32(j)})
			bv := bpf.BackendVal{Addr: b.Addr.Addr().As16(), Port: htons(b.Addr.Port())}
			if b.Weight == 0 {
				bv.Flags = bpf.BackendDraining // no slot, and affinity to it ends
			}
			bvals = append(bvals, bv)
		}
	}
	// Backends first: a table (old or new) only names indices that exist.
	if err := batchPut(d.objs.Backends(), bkeys, bvals); err != nil {
		return fmt.Errorf("services: backends: %w", err)
	}
	// A shrinking table gets its smaller size before the swap, a growing
	// one after: a slot index is in range of whichever table the
	// datapath sees.
	var shrink, rest []svcPlan
	for _, p := range plans {
		if p.oldSize > p.size {
			shrink = append(shrink, p)
		} else {
			rest = append(rest, p)
		}
	}
	if err := d.putServiceVals(shrink); err != nil {
		return err
	}
	var okeys, ovals []uint32
	for _, p := range plans {
		if p.inner != nil {
			okeys, ovals = append(okeys, p.s.ID), append(ovals, uint32(p.inner.FD()))
			continue
		}
		// Same size: rewrite the slots in place (no swap, no wait).
		inner, err := d.maglevTable(p.s.ID)
		if err != nil {
			return fmt.Errorf("service %s: %w", p.s.VIP, err)
		}
		err = fillSlots(inner, p.slots)
		inner.Close()
		if err != nil {
			return fmt.Errorf("service %s: rewrite maglev table: %w", p.s.VIP, err)
		}
	}
	if err := batchPut(d.objs.Maglev(), okeys, ovals); err != nil {
		return fmt.Errorf("services: install maglev tables: %w", err)
	}
	if err := d.putServiceVals(rest); err != nil {
		return err
	}
	// Backend slots past a shorter list are unused now.
	var stale []bpf.BackendKey
	for _, p := range plans {
		old, known := d.shared.backends(p.s.ID)
		if !known {
			old = d.probeBackends(p.s.ID, len(p.s.Backends))
		}
		for j := len(p.s.Backends); j < old; j++ {
			stale = append(stale, bpf.BackendKey{Service: p.s.ID, Index: uint32(j)})
		}
		d.shared.set(p.s.ID, serviceBackendRefs(p.s), p.size)
	}
	for _, k := range stale {
		if err := d.objs.Backends().Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("services: remove backend %d of service %d: %w", k.Index, k.Service, err)
		}
	}
	var fresh []bpf.ServiceKey
	for _, p := range plans {
		if p.oldSize == 0 {
			fresh = append(fresh, serviceKey(p.s))
		}
	}
	if _, err := d.forgetUnanswered(fresh); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	return nil
}

// forgetUnanswered deletes the untranslated, never-answered flows (state
// CT_NEW, no NAT: both entries) to the VIPs of vips, services just
// programmed. A SYN sent to a VIP before its service was programmed (a
// client trying a ClusterIP while xlaned starts or syncs) made such a
// flow, 60 s (CT_TIMEOUT_TCP_SYN); a later connection whose client
// reuses that port then found the entry and left untranslated, its SYN
// and every retransmission unanswered until the entry expired: a connect
// timeout, no drop counted (the bench k8s check run's one failure after
// xlaned's start, docs/benchmarks.md). A flow that was answered (to an
// address that became a VIP) keeps its way. One conntrack scan per call
// with new services; none without.
func (d *BPF) forgetUnanswered(vips []bpf.ServiceKey) (int, error) {
	if len(vips) == 0 {
		return 0, nil
	}
	want := make(map[bpf.ServiceKey]bool, len(vips))
	for _, k := range vips {
		want[k] = true
	}
	return d.deleteCT(func(k *bpf.CTKey, v *bpf.CTVal) bool {
		if v.Nat != uint8(bpf.CTNatNone) || v.State != uint8(bpf.CTNew) {
			return false
		}
		if v.Dir == uint8(bpf.CTDirOrig) {
			return want[bpf.ServiceKey{Addr: k.Daddr, Port: k.Dport, Proto: k.Proto}]
		}
		return want[bpf.ServiceKey{Addr: k.Saddr, Port: k.Sport, Proto: k.Proto}]
	})
}

// putServiceVals writes the services' xlane_services entries.
func (d *BPF) putServiceVals(plans []svcPlan) error {
	keys := make([]bpf.ServiceKey, 0, len(plans))
	vals := make([]bpf.ServiceVal, 0, len(plans))
	for _, p := range plans {
		sv := bpf.ServiceVal{Id: p.s.ID, MaglevSize: p.size}
		if p.s.Affinity {
			sv.Flags |= bpf.SvcAffinity
			sv.AffinityTimeout = uint32(p.s.EffectiveAffinityTimeout())
		}
		keys, vals = append(keys, serviceKey(p.s)), append(vals, sv)
	}
	if err := batchPut(d.objs.Services(), keys, vals); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	return nil
}

// programmedSize is the table size s has in the datapath now, 0 if it
// has none (or another service has its VIP: then it gets a new table).
func (d *BPF) programmedSize(s *model.Service) uint32 {
	if size, ok := d.shared.size(s.ID); ok {
		return size
	}
	var v bpf.ServiceVal
	k := serviceKey(s)
	if err := d.objs.Services().Lookup(&k, &v); err != nil || v.Id != s.ID {
		return 0
	}
	// Programmed before this daemon started: in place only if the table
	// is there and of that size.
	if inner, err := d.maglevTable(s.ID); err == nil {
		defer inner.Close()
		if inner.MaxEntries() == v.MaglevSize {
			return v.MaglevSize
		}
	}
	return 0
}

// maglevTable opens service id's installed slot array.
func (d *BPF) maglevTable(id uint32) (*ebpf.Map, error) {
	var innerID ebpf.MapID
	if err := d.objs.Maglev().Lookup(id, &innerID); err != nil {
		return nil, fmt.Errorf("maglev table of service %d: %w", id, err)
	}
	return ebpf.NewMapFromID(innerID)
}

// probeBackends counts service id's backend entries from index from on
// (a service programmed before this daemon started), up to from+the
// first gap.
func (d *BPF) probeBackends(id uint32, from int) int {
	var v bpf.BackendVal
	for i := from; ; i++ {
		k := bpf.BackendKey{Service: id, Index: uint32(i)}
		if err := d.objs.Backends().Lookup(&k, &v); err != nil {
			return i
		}
	}
}

func fillSlots(m *ebpf.Map, slots []uint32) error {
	keys := make([]uint32, len(slots))
	for i := range keys {
		keys[i] = uint32(i)
	}
	return batchPut(m, keys, slots)
}

// batchPut writes keys[i] = vals[i] with one BPF_MAP_UPDATE_BATCH where
// the kernel has it for the map's type, else one update each.
func batchPut[K, V any](m *ebpf.Map, keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchUpdate(keys, vals, nil)
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Put(&keys[i], &vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// DeleteService removes a service. Missing parts are fine.
func (d *BPF) DeleteService(s model.Service) error { return d.DeleteServices([]model.Service{s}) }

// DeleteServices removes services, batched as PutServices. Missing parts
// are fine.
func (d *BPF) DeleteServices(svcs []model.Service) error {
	var skeys []bpf.ServiceKey
	var ids []uint32
	var bkeys []bpf.BackendKey
	for i := range svcs {
		s := &svcs[i]
		skeys, ids = append(skeys, serviceKey(s)), append(ids, s.ID)
		n, known := d.shared.backends(s.ID)
		if !known {
			n = d.probeBackends(s.ID, 0)
		}
		for i := 0; i < n; i++ {
			bkeys = append(bkeys, bpf.BackendKey{Service: s.ID, Index: uint32(i)})
		}
	}
	// The VIP first: no new flow looks for the table once it is gone.
	errs := []error{batchDelete(d.objs.Services(), skeys), batchDelete(d.objs.Maglev(), ids), batchDelete(d.objs.Backends(), bkeys)}
	for _, s := range svcs {
		d.shared.set(s.ID, nil, 0)
	}
	return errors.Join(errs...)
}

// batchDelete deletes keys with BPF_MAP_DELETE_BATCH where the kernel has
// it, else one by one; keys already gone are fine. A batch stops at the
// first missing key: the rest are then looked up (cheap) and the present
// ones deleted in one more batch, not one batch per missing key (a batch
// on a hash of maps waits for an RCU grace period).
func batchDelete[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	n, err := m.BatchDelete(keys, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ebpf.ErrNotSupported):
		return deleteEach(m, keys)
	case !errors.Is(err, ebpf.ErrKeyNotExist) || n >= len(keys):
		return err
	}
	var present []K
	val := make([]byte, m.ValueSize())
	for i := n + 1; i < len(keys); i++ {
		if m.Lookup(&keys[i], val) == nil {
			present = append(present, keys[i])
		}
	}
	if len(present) == 0 {
		return nil
	}
	if _, err := m.BatchDelete(present, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	} else if err != nil {
		return deleteEach(m, present) // one went meanwhile
	}
	return nil
}

func deleteEach[K any](m *ebpf.Map, keys []K) error {
	var errs []error
	for i := range keys {
		if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ServiceIDs lists the programmed services by ID: their ID, VIP and
// protocol.
func (d *BPF) ServiceIDs() (map[uint32]model.Service, error) {
	out := map[uint32]model.Service{}
	var (
		k bpf.ServiceKey
		v bpf.ServiceVal
	)
	it := d.objs.Services().Iterate()
	for it.Next(&k, &v) {
		out[v.Id] = model.Service{ID: v.Id, VIP: netip.AddrPortFrom(netip.AddrFrom16(k.Addr).Unmap(), ntohs(k.Port)), Proto: protoName(k.Proto)}
	}
	return out, it.Err()
}
