package datapath

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// ServicesMemory is what the programmed services cost in kernel memory,
// as the kernel accounts the BPF maps (memlock: the maps' own figures,
// before the allocator rounds them up).
type ServicesMemory struct {
	Services int
	// Tables: every service's Maglev slot array (8 bytes a slot, the
	// kernel rounds 4-byte values up, and the map's header).
	Tables uint64
	// Maps: xlane_services, xlane_maglev and xlane_backends, entries and
	// hash buckets.
	Maps uint64
	// Fixed: what Maps costs with no service at all (the buckets, sized
	// for the most services the maps take).
	Fixed uint64
}

// PerService is the average cost of one service beyond Fixed, 0 without
// services.
func (m ServicesMemory) PerService() uint64 {
	if m.Services == 0 || m.Tables+m.Maps < m.Fixed {
		return 0
	}
	return (m.Tables + m.Maps - m.Fixed) / uint64(m.Services)
}

// ServicesMemory sums the tables of the services this daemon programmed
// and reads the shared maps' memlock.
func (d *BPF) ServicesMemory() (ServicesMemory, error) {
	var m ServicesMemory
	d.shared.mu.RLock()
	m.Services = len(d.shared.bySvc)
	sizes := map[uint32]int{}
	for _, p := range d.shared.bySvc {
		sizes[p.size]++
	}
	d.shared.mu.RUnlock()
	for size, n := range sizes {
		b, err := tableMemlock(size)
		if err != nil {
			return m, err
		}
		m.Tables += uint64(n) * b
	}
	for _, mp := range []*ebpf.Map{d.objs.Services(), d.objs.Maglev(), d.objs.Backends()} {
		info, err := mp.Info()
		if err != nil {
			return m, err
		}
		b, _ := info.Memlock()
		m.Maps += b
		f, err := emptyMemlock(mp, info)
		if err != nil {
			return m, err
		}
		m.Fixed += f
	}
	return m, nil
}

// emptyMemlocks caches emptyMemlock per map name.
var emptyMemlocks sync.Map // string -> uint64

// emptyMemlock is the memlock of mp with no entry: that of a throwaway
// map of the same spec, made once.
func emptyMemlock(mp *ebpf.Map, info *ebpf.MapInfo) (uint64, error) {
	if b, ok := emptyMemlocks.Load(info.Name); ok {
		return b.(uint64), nil
	}
	spec := &ebpf.MapSpec{Type: mp.Type(), KeySize: mp.KeySize(), ValueSize: mp.ValueSize(), MaxEntries: mp.MaxEntries(), Flags: mp.Flags()}
	if spec.Type == ebpf.HashOfMaps {
		spec.InnerMap = bpf.MaglevInnerSpec(bpf.DefaultMaglevSize)
	}
	e, err := ebpf.NewMap(spec)
	if err != nil {
		return 0, fmt.Errorf("empty copy of %s: %w", info.Name, err)
	}
	defer e.Close()
	ei, err := e.Info()
	if err != nil {
		return 0, err
	}
	b, _ := ei.Memlock()
	emptyMemlocks.Store(info.Name, b)
	return b, nil
}

// tableMemlocks caches the kernel's memlock of a table per size.
var tableMemlocks sync.Map // uint32 -> uint64

// tableMemlock is the memlock of a table of size slots: the kernel's
// figure for one made to ask (once per size).
func tableMemlock(size uint32) (uint64, error) {
	if b, ok := tableMemlocks.Load(size); ok {
		return b.(uint64), nil
	}
	m, err := ebpf.NewMap(bpf.MaglevInnerSpec(size))
	if err != nil {
		return 0, err
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return 0, err
	}
	b, _ := info.Memlock()
	tableMemlocks.Store(size, b)
	return b, nil
}
