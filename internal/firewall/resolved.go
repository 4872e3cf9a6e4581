package firewall

import (
	"errors"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// ResolvedMap is xlane_fw_resolved as internal/fqdn writes it (fqdn.Map):
// addresses keyed as conntrack keys them (IPv4 as ::ffff:a.b.c.d).
type ResolvedMap struct{ M *ebpf.Map }

// Resolved returns the installer's xlane_fw_resolved.
func (in *Installer) Resolved() ResolvedMap { return ResolvedMap{in.m.Resolved} }

func resolvedKey(slot uint32, src, dst netip.Addr) bpf.FwResolvedKey {
	return bpf.FwResolvedKey{Slot: slot, Src: src.Unmap().As16(), Dst: dst.Unmap().As16()}
}

// Put allows dst for src under the rule of slot until expires
// (CLOCK_MONOTONIC ns).
func (r ResolvedMap) Put(slot uint32, src, dst netip.Addr, expires uint64) error {
	return r.M.Put(resolvedKey(slot, src, dst), bpf.FwResolvedVal{Expires: expires})
}

// Delete removes an entry; a missing one is no error.
func (r ResolvedMap) Delete(slot uint32, src, dst netip.Addr) error {
	if err := r.M.Delete(resolvedKey(slot, src, dst)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// Range calls fn for every entry.
func (r ResolvedMap) Range(fn func(slot uint32, src, dst netip.Addr, expires uint64)) error {
	var k bpf.FwResolvedKey
	var v bpf.FwResolvedVal
	it := r.M.Iterate()
	for it.Next(&k, &v) {
		fn(k.Slot, netip.AddrFrom16(k.Src).Unmap(), netip.AddrFrom16(k.Dst).Unmap(), v.Expires)
	}
	return it.Err()
}
