package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// endpointFlags are the XL_EP_* flags (bpf/lib/abi.h) of the entry's
// booleans, in one table for both directions.
func endpointFlags(e *model.EndpointEntry) []struct {
	on   *bool
	flag uint16
} {
	return []struct {
		on   *bool
		flag uint16
	}{
		{&e.XDPTarget, bpf.EPFlagXDPTarget},
		{&e.Masquerade, bpf.EPFlagMasquerade},
		{&e.ICCOff, bpf.EPFlagNoICC},
		{&e.Isolated, bpf.EPFlagIsolated},
		{&e.AllowUnsolicited, bpf.EPFlagAllowUnsolicited},
		{&e.VLAN, bpf.EPFlagVLAN},
		{&e.NoPeer, bpf.EPFlagNoPeer},
	}
}

// endpointVal encodes an endpoint entry as struct endpoint_val.
func endpointVal(e model.EndpointEntry) bpf.EndpointVal {
	v := bpf.NewEndpointVal(e.Ifindex, e.NetworkID, e.MAC, e.HostMAC, e.MTU, false)
	for _, f := range endpointFlags(&e) {
		if *f.on {
			v.Flags |= f.flag
		}
	}
	return v
}

// endpointEntry decodes struct endpoint_val.
func endpointEntry(v *bpf.EndpointVal) model.EndpointEntry {
	e := model.EndpointEntry{Ifindex: int(v.Ifindex), NetworkID: v.NetworkId, MTU: int(v.Mtu),
		MAC: net.HardwareAddr(v.Mac[:]), HostMAC: net.HardwareAddr(v.HostMac[:])}
	for _, f := range endpointFlags(&e) {
		*f.on = v.Flags&f.flag != 0
	}
	return e
}

// PutEndpoint maps addr to the host device that reaches it.
func (d *BPF) PutEndpoint(addr netip.Addr, e model.EndpointEntry) error {
	k, v := bpf.KeyFromAddr(addr), endpointVal(e)
	if err := d.objs.Endpoints().Put(&k, &v); err != nil {
		return fmt.Errorf("put endpoint %s: %w", addr, err)
	}
	return nil
}

// Endpoint returns what the endpoint map holds for addr.
func (d *BPF) Endpoint(addr netip.Addr) (model.EndpointEntry, error) {
	k := bpf.KeyFromAddr(addr)
	var v bpf.EndpointVal
	if err := d.objs.Endpoints().Lookup(&k, &v); err != nil {
		return model.EndpointEntry{}, fmt.Errorf("endpoint %s: %w", addr, err)
	}
	return endpointEntry(&v), nil
}

// DeleteEndpoint removes addr. Missing is fine.
func (d *BPF) DeleteEndpoint(addr netip.Addr) error {
	k := bpf.KeyFromAddr(addr)
	if err := d.objs.Endpoints().Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete endpoint %s: %w", addr, err)
	}
	return nil
}

// EndpointAddrs lists the addresses in the endpoint map.
func (d *BPF) EndpointAddrs() ([]netip.Addr, error) {
	var (
		k   bpf.EndpointKey
		v   bpf.EndpointVal
		out []netip.Addr
	)
	it := d.objs.Endpoints().Iterate()
	for it.Next(&k, &v) {
		out = append(out, bpf.AddrFromKey(k))
	}
	return out, it.Err()
}
