package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// Flows lists up to limit conntrack entries (0: all).
func (d *BPF) Flows(limit int) ([]model.Flow, error) {
	var out []model.Flow
	now := d.now()
	err := d.scanCT(func(keys []bpf.CTKey, vals []bpf.CTVal) bool {
		for i := range keys {
			out = append(out, flowOf(&keys[i], &vals[i], now))
			if limit > 0 && len(out) >= limit {
				return false
			}
		}
		return true
	})
	return out, err
}

// flowOf decodes one conntrack entry; now is the conntrack clock's.
func flowOf(k *bpf.CTKey, v *bpf.CTVal, now uint64) model.Flow {
	f := model.Flow{
		Proto:   k.Proto,
		Src:     netip.AddrPortFrom(netip.AddrFrom16(k.Saddr).Unmap(), ntohs(k.Sport)),
		Dst:     netip.AddrPortFrom(netip.AddrFrom16(k.Daddr).Unmap(), ntohs(k.Dport)),
		Reply:   v.Dir == uint8(bpf.CTDirReply),
		State:   bpf.CTStateName(v.State),
		Packets: v.Packets, Bytes: v.Bytes,
		ExpiresInSeconds: (int64(v.Expires) - int64(now)) / 1e9,
	}
	switch bpf.CTNat(v.Nat) {
	case bpf.CTNatSrc:
		f.NAT = "snat"
	case bpf.CTNatDst:
		f.NAT = "dnat"
	case bpf.CTNatBoth:
		f.NAT = "dnat+snat"
		f.NATSrc = netip.AddrPortFrom(netip.AddrFrom16(v.NatSaddr).Unmap(), ntohs(v.NatSport))
	}
	if f.NAT != "" {
		f.NATTo = netip.AddrPortFrom(netip.AddrFrom16(v.NatAddr).Unmap(), ntohs(v.NatPort))
	}
	return f
}

// CTStats summarises the table.
type CTStats struct {
	Entries    int    `json:"entries"`
	MaxEntries uint32 `json:"max_entries"`
	Expired    int    `json:"expired"`
	// BytesPerEntry is key + value + the kernel's per-element overhead
	// of a hash map (struct htab_elem, rounded), what one entry costs.
	BytesPerEntry int `json:"bytes_per_entry"`
	// DNAT counts the original-direction entries of translated flows by
	// the address they were sent to and where they went: for a service
	// VIP, the flows each backend was chosen for and still holds.
	DNAT map[DNATFlow]int `json:"-"`
}

// DNATFlow is a destination and the target a DNAT flow to it was
// translated to.
type DNATFlow struct {
	Proto  uint8
	Dst    netip.AddrPort // as sent: a VIP, a published port
	Target netip.AddrPort // the backend or endpoint
}

// CTStats counts entries and expired ones.
func (d *BPF) CTStats() (CTStats, error) {
	st := CTStats{MaxEntries: d.objs.CT().MaxEntries(), BytesPerEntry: ctEntryBytes(d.objs.CT())}
	now := d.now()
	err := d.scanCT(func(keys []bpf.CTKey, vals []bpf.CTVal) bool {
		st.Entries += len(vals)
		for i := range vals {
			v := &vals[i]
			if v.Expires < now {
				st.Expired++
			}
			nat := bpf.CTNat(v.Nat)
			if v.Dir != uint8(bpf.CTDirReply) && (nat == bpf.CTNatDst || nat == bpf.CTNatBoth) {
				if st.DNAT == nil {
					st.DNAT = map[DNATFlow]int{}
				}
				k := &keys[i]
				st.DNAT[DNATFlow{
					Proto:  k.Proto,
					Dst:    netip.AddrPortFrom(netip.AddrFrom16(k.Daddr).Unmap(), ntohs(k.Dport)),
					Target: netip.AddrPortFrom(netip.AddrFrom16(v.NatAddr).Unmap(), ntohs(v.NatPort)),
				}]++
			}
		}
		return true
	})
	return st, err
}

// ctEntryBytes estimates a hash map element's size: htab_elem header
// (hash node, hash, padding: 48 bytes on 64-bit) + key and value each
// rounded up to 8 bytes, as kernel/bpf/hashtab.c lays them out.
func ctEntryBytes(m *ebpf.Map) int {
	round := func(n uint32) int { return int((n + 7) &^ 7) }
	return 48 + round(m.KeySize()) + round(m.ValueSize())
}

// ctChunk is how many entries one batch system call reads or deletes. A
// pass over a full table of a million entries is ~250 lookups of 4096
// entries (~360 KB of buffers) rather than two system calls per entry.
const ctChunk = 4096

// scanCT reads xlane_ct a chunk at a time with BPF_MAP_LOOKUP_BATCH and
// calls fn with each chunk until the table ends or fn returns false. The
// kernel walks the table a bucket at a time and the cursor is a bucket
// index, so fn may delete entries it has been given; entries added or
// deleted meanwhile by the datapath may or may not be seen, as with any
// walk of a live hash map.
func (d *BPF) scanCT(fn func(keys []bpf.CTKey, vals []bpf.CTVal) bool) error {
	m := d.objs.CT()
	size := ctChunk
	keys, vals := make([]bpf.CTKey, size), make([]bpf.CTVal, size)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		if errors.Is(err, unix.ENOSPC) && size < 1<<20 {
			// One bucket holds more entries than the buffers: the
			// cursor did not move; retry with larger ones.
			size *= 2
			keys, vals = make([]bpf.CTKey, size), make([]bpf.CTVal, size)
			continue
		}
		end := errors.Is(err, ebpf.ErrKeyNotExist)
		if err != nil && !end {
			return fmt.Errorf("read conntrack: %w", err)
		}
		if n > 0 && !fn(keys[:n], vals[:n]) {
			return nil
		}
		if end {
			return nil
		}
	}
}

// FlushCT deletes every conntrack entry, a chunk at a time with
// BPF_MAP_LOOKUP_AND_DELETE_BATCH.
func (d *BPF) FlushCT() (int, error) {
	m := d.objs.CT()
	size := ctChunk
	keys, vals := make([]bpf.CTKey, size), make([]bpf.CTVal, size)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		n, err := m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		if errors.Is(err, unix.ENOSPC) && size < 1<<20 {
			size *= 2
			keys, vals = make([]bpf.CTKey, size), make([]bpf.CTVal, size)
			continue
		}
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("flush conntrack: %w", err)
		}
	}
}
