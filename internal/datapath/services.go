package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/maglev"
)

// Backend is one service backend; Weight 0 drains it (no new flows).
type Backend struct {
	Addr   netip.AddrPort
	Weight uint32
}

// Service is a VIP balanced over backends.
type Service struct {
	ID       uint32
	VIP      netip.AddrPort
	Proto    uint8
	Affinity bool
	Backends []Backend
}

func serviceKey(s Service) bpf.ServiceKey {
	return bpf.ServiceKey{Addr: s.VIP.Addr().As16(), Port: htons(s.VIP.Port()), Proto: s.Proto}
}

// MaglevSize is the slots of every service table of this datapath.
func (d *BPF) MaglevSize() uint32 { return d.maglevSize }

// PutService programs (or reprograms) a service. The new Maglev table is
// built aside and swapped in whole; flows already tracked keep their
// backend whatever the table says.
func (d *BPF) PutService(s Service) error {
	m := d.MaglevSize()
	tbl, err := maglev.New(uint64(m))
	if err != nil {
		return err
	}
	bs := make([]maglev.Backend, len(s.Backends))
	for i, b := range s.Backends {
		bs[i] = maglev.Backend{ID: b.Addr.String(), Weight: b.Weight}
	}
	slots, err := tbl.Populate(bs)
	if err != nil && !errors.Is(err, maglev.ErrNoActiveBackends) {
		return fmt.Errorf("service %s: %w", s.VIP, err)
	}
	for i, b := range s.Backends {
		k := bpf.BackendKey{Service: s.ID, Index: uint32(i)}
		v := bpf.BackendVal{Addr: b.Addr.Addr().As16(), Port: htons(b.Addr.Port())}
		if err := d.objs.Backends().Put(&k, &v); err != nil {
			return fmt.Errorf("service %s backend %s: %w", s.VIP, b.Addr, err)
		}
	}
	inner, err := ebpf.NewMap(bpf.MaglevInnerSpec(m))
	if err != nil {
		return fmt.Errorf("service %s: maglev table: %w", s.VIP, err)
	}
	defer inner.Close()
	keys := make([]uint32, len(slots))
	vals := make([]uint32, len(slots))
	for i, b := range slots {
		keys[i], vals[i] = uint32(i), uint32(b)
	}
	if _, err := inner.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("service %s: fill maglev table: %w", s.VIP, err)
	}
	if err := d.objs.Maglev().Put(s.ID, inner); err != nil {
		return fmt.Errorf("service %s: install maglev table: %w", s.VIP, err)
	}
	sk := serviceKey(s)
	sv := bpf.ServiceVal{Id: s.ID, MaglevSize: m}
	if s.Affinity {
		sv.Flags |= bpf.SvcAffinity
	}
	if err := d.objs.Services().Put(&sk, &sv); err != nil {
		return fmt.Errorf("service %s: %w", s.VIP, err)
	}
	// Backend slots past the new list are unused now.
	for i := len(s.Backends); ; i++ {
		k := bpf.BackendKey{Service: s.ID, Index: uint32(i)}
		if err := d.objs.Backends().Delete(&k); err != nil {
			break
		}
	}
	d.shared.set(s.ID, serviceBackendRefs(s))
	return nil
}

// DeleteService removes a service. Missing parts are fine.
func (d *BPF) DeleteService(s Service) error {
	sk := serviceKey(s)
	var errs []error
	for _, err := range []error{d.objs.Services().Delete(&sk), d.objs.Maglev().Delete(s.ID)} {
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	for i := 0; ; i++ {
		k := bpf.BackendKey{Service: s.ID, Index: uint32(i)}
		if err := d.objs.Backends().Delete(&k); err != nil {
			break
		}
	}
	d.shared.set(s.ID, nil)
	return errors.Join(errs...)
}

// ServiceIDs lists the ids of the programmed services.
func (d *BPF) ServiceIDs() (map[uint32]Service, error) {
	out := map[uint32]Service{}
	var (
		k bpf.ServiceKey
		v bpf.ServiceVal
	)
	it := d.objs.Services().Iterate()
	for it.Next(&k, &v) {
		out[v.Id] = Service{ID: v.Id, VIP: netip.AddrPortFrom(netip.AddrFrom16(k.Addr).Unmap(), ntohs(k.Port)), Proto: k.Proto}
	}
	return out, it.Err()
}
