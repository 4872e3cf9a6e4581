package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// NodeConfig is what the datapath needs to know about the node.
type NodeConfig struct {
	UplinkIfindex int
	// Masquerade addresses (usually the uplink's first global addresses);
	// an invalid one disables masquerade for that family.
	MasqV4, MasqV6 netip.Addr
	// NATPorts is the inclusive source-port range masquerade allocates
	// from; it must not overlap the node's ip_local_port_range.
	NATPortMin, NATPortMax uint16
	// NetnsCookie is the node netns' cookie: socket hooks act only there.
	NetnsCookie uint64
}

// SetConfig writes xlane_config.
func (d *BPF) SetConfig(c NodeConfig) error {
	v := bpf.Config{UplinkIfindex: uint32(c.UplinkIfindex), NatPortMin: c.NATPortMin, NatPortMax: c.NATPortMax,
		NetnsCookie: c.NetnsCookie}
	if c.MasqV4.IsValid() {
		v.UplinkV4 = c.MasqV4.As16()
	}
	if c.MasqV6.IsValid() {
		v.UplinkV6 = c.MasqV6.As16()
	}
	zero := uint32(0)
	if err := d.objs.Config().Put(&zero, &v); err != nil {
		return fmt.Errorf("write datapath config: %w", err)
	}
	return nil
}

const uplinkTCSuffix = "uplinktc"

// AttachUplinkTC attaches the uplink's tcx ingress program (reverse NAT,
// published ports), adopting a pinned link of its own.
func (d *BPF) AttachUplinkTC(ifname string, ifindex int) error {
	return d.attachHook(ifname, ifindex, hook{uplinkTCSuffix, "tcx", ebpf.AttachTCXIngress, 0, (*bpf.Objects).TCFromUplink})
}

// DetachUplinkTC removes it (missing is fine).
func (d *BPF) DetachUplinkTC(ifname string) error {
	return d.detachHook(ifname, hook{suffix: uplinkTCSuffix})
}

// Port is a published port: node port -> endpoint address and port.
type Port struct {
	Proto    uint8 // unix.IPPROTO_TCP or IPPROTO_UDP
	NodePort uint16
	Addr     netip.Addr
	Port     uint16
}

func publishKey(p Port) bpf.PublishKey {
	fam := uint8(6)
	if p.Addr.Is4() {
		fam = 4
	}
	return bpf.PublishKey{Port: htons(p.NodePort), Proto: p.Proto, Family: fam}
}

// PutPort publishes p.
func (d *BPF) PutPort(p Port) error {
	k := publishKey(p)
	v := bpf.PublishVal{Addr: p.Addr.As16(), Port: htons(p.Port)}
	return d.objs.Publish().Put(&k, &v)
}

// DeletePort withdraws p. Missing is fine.
func (d *BPF) DeletePort(p Port) error {
	k := publishKey(p)
	if err := d.objs.Publish().Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// PublishedPorts lists what xlane_publish holds.
func (d *BPF) PublishedPorts() ([]Port, error) {
	var (
		k   bpf.PublishKey
		v   bpf.PublishVal
		out []Port
	)
	it := d.objs.Publish().Iterate()
	for it.Next(&k, &v) {
		out = append(out, Port{Proto: k.Proto, NodePort: ntohs(k.Port), Addr: netip.AddrFrom16(v.Addr).Unmap(), Port: ntohs(v.Port)})
	}
	return out, it.Err()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
func ntohs(v uint16) uint16 { return htons(v) }

// Flow is one conntrack entry (one direction of a flow).
type Flow struct {
	Proto            uint8
	Src, Dst         netip.AddrPort
	Reply            bool   // the entry of the reply direction
	State            string // new, established, closing, closed
	NAT              string // "", "snat", "dnat" or "dnat+snat"
	NATTo            netip.AddrPort
	NATSrc           netip.AddrPort // dnat+snat: the new source (hairpin, remapped port)
	Packets, Bytes   uint64
	ExpiresInSeconds int64
}

var stateNames = map[bpf.CTState]string{0: "new", 1: "established", 2: "closing", 3: "closed"}

// Flows lists up to limit conntrack entries (0: all).
func (d *BPF) Flows(limit int) ([]Flow, error) {
	var out []Flow
	now := d.now()
	err := d.scanCT(func(keys []bpf.CTKey, vals []bpf.CTVal) bool {
		for i := range keys {
			k, v := &keys[i], &vals[i]
			f := Flow{
				Proto:   k.Proto,
				Src:     netip.AddrPortFrom(netip.AddrFrom16(k.Saddr).Unmap(), ntohs(k.Sport)),
				Dst:     netip.AddrPortFrom(netip.AddrFrom16(k.Daddr).Unmap(), ntohs(k.Dport)),
				Reply:   v.Dir == uint8(bpf.CTDirReply),
				State:   stateNames[bpf.CTState(v.State)],
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
			out = append(out, f)
			if limit > 0 && len(out) >= limit {
				return false
			}
		}
		return true
	})
	return out, err
}

// CTStats summarises the table.
type CTStats struct {
	Entries    int    `json:"entries"`
	MaxEntries uint32 `json:"max_entries"`
	Expired    int    `json:"expired"`
	// BytesPerEntry is key + value + the kernel's per-element overhead
	// of a hash map (struct htab_elem, rounded), what one entry costs.
	BytesPerEntry int `json:"bytes_per_entry"`
}

// CTStats counts entries and expired ones.
func (d *BPF) CTStats() (CTStats, error) {
	st := CTStats{MaxEntries: d.objs.CT().MaxEntries(), BytesPerEntry: ctEntryBytes(d.objs.CT())}
	now := d.now()
	err := d.scanCT(func(_ []bpf.CTKey, vals []bpf.CTVal) bool {
		st.Entries += len(vals)
		for i := range vals {
			if vals[i].Expires < now {
				st.Expired++
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

// GCCT deletes entries whose deadline passed more than grace ago: a flow
// that is still sending moves its deadline on every packet and is never
// collected; one idle past its timeout is gone within grace + the GC
// interval. A pass costs one batch lookup per ctChunk entries and one
// batch delete per chunk that has expired entries.
func (d *BPF) GCCT(graceNanos uint64) (int, error) {
	now := d.now()
	return d.deleteCT(func(v bpf.CTVal) bool { return ctCollectable(v.Expires, now, graceNanos) })
}

// deleteCT deletes the entries match selects, chunk by chunk as scanCT
// reads them. An entry someone else deleted meanwhile is skipped.
func (d *BPF) deleteCT(match func(bpf.CTVal) bool) (int, error) {
	m := d.objs.CT()
	n := 0
	var derr error
	del := make([]bpf.CTKey, 0, ctChunk)
	err := d.scanCT(func(keys []bpf.CTKey, vals []bpf.CTVal) bool {
		del = del[:0]
		for i := range keys {
			if match(vals[i]) {
				del = append(del, keys[i])
			}
		}
		for len(del) > 0 {
			done, err := m.BatchDelete(del, nil)
			n += done
			switch {
			case err == nil:
				del = del[:0]
			case errors.Is(err, ebpf.ErrKeyNotExist) && done < len(del):
				// del[done] went meanwhile: go on after it.
				del = del[done+1:]
			default:
				derr = fmt.Errorf("delete conntrack entries: %w", err)
				return false
			}
		}
		return true
	})
	if derr != nil {
		return n, derr
	}
	return n, err
}

// AttachSockLB attaches the connect hooks to the cgroup at path (the
// cgroup2 root: every process of the node; the programs themselves act
// only in the node's netns).
func (d *BPF) AttachSockLB(cgroupPath string) error {
	for _, h := range []struct {
		suffix string
		attach ebpf.AttachType
		prog   *ebpf.Program
	}{
		{"connect4", ebpf.AttachCGroupInet4Connect, d.objs.Connect4()},
		{"connect6", ebpf.AttachCGroupInet6Connect, d.objs.Connect6()},
	} {
		pin := d.linkPin("cgroup", h.suffix)
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			err := l.Update(h.prog)
			l.Close()
			if err == nil {
				continue
			}
			os.Remove(pin)
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupPath, Attach: h.attach, Program: h.prog})
		if err != nil {
			return fmt.Errorf("attach %s to cgroup %s: %w", h.suffix, cgroupPath, err)
		}
		err = l.Pin(pin)
		l.Close()
		if err != nil {
			return fmt.Errorf("pin %s link: %w", h.suffix, err)
		}
	}
	return nil
}
