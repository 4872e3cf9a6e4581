package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// GCCT deletes entries whose deadline passed more than grace ago: a flow
// that is still sending moves its deadline on every packet and is never
// collected; one idle past its timeout is gone within grace + the GC
// interval. A pass costs one batch lookup per ctChunk entries and one
// batch delete per chunk that has expired entries. Closed flows to a
// backend several services share are kept for its TIME_WAIT
// (CTTimeWaitHold). collected, if not nil, is given every entry the pass
// selects (both of a flow's), decoded, before it is deleted.
func (d *BPF) GCCT(graceNanos uint64, collected func(model.Flow)) (int, error) {
	now := d.now()
	n, err := d.deleteCT(func(k *bpf.CTKey, v *bpf.CTVal) bool {
		if !ctCollectable(v.Expires, now, graceNanos) || d.ctHeld(k, v, now) {
			return false
		}
		if collected != nil {
			collected(flowOf(k, v, now))
		}
		return true
	})
	// Entries the programs of an older build created during an upgrade
	// are not counted in xlane_ct_seq: every pass forgets the flows the
	// uplink remembers as missing (bpf.Objects.CTWritten), which bounds
	// that window to one interval.
	if werr := d.objs.CTWritten(); err == nil {
		err = werr
	}
	return n, err
}

// deleteCT deletes the entries match selects, chunk by chunk as scanCT
// reads them. An entry someone else deleted meanwhile is skipped.
func (d *BPF) deleteCT(match func(*bpf.CTKey, *bpf.CTVal) bool) (int, error) {
	m := d.objs.CT()
	n := 0
	var derr error
	del := make([]bpf.CTKey, 0, ctChunk)
	err := d.scanCT(func(keys []bpf.CTKey, vals []bpf.CTVal) bool {
		del = del[:0]
		for i := range keys {
			if match(&keys[i], &vals[i]) {
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
