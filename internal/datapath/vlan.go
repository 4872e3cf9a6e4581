package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// SetVLANDevice tells the uplink's tc program that the VLAN device at
// ifindex carries network networkID (bpf/lib/vlan.h).
func (d *BPF) SetVLANDevice(ifindex int, networkID uint32) error {
	k := uint32(ifindex)
	if err := d.objs.VLANDev().Put(&k, &networkID); err != nil {
		return fmt.Errorf("put vlan device %d: %w", ifindex, err)
	}
	return nil
}

// DeleteVLANDevice forgets it; missing is fine.
func (d *BPF) DeleteVLANDevice(ifindex int) error {
	k := uint32(ifindex)
	if err := d.objs.VLANDev().Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete vlan device %d: %w", ifindex, err)
	}
	return nil
}

// VLANDevices lists the VLAN devices the programs know: ifindex -> network.
func (d *BPF) VLANDevices() (map[int]uint32, error) {
	out := map[int]uint32{}
	var k, v uint32
	it := d.objs.VLANDev().Iterate()
	for it.Next(&k, &v) {
		out[int(k)] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list vlan devices: %w", err)
	}
	return out, nil
}
