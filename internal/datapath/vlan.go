package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// VLAN is a VLAN network's entry in the datapath (bpf/lib/vlan.h): its
// network, the uplink its tagged frames use, and the two ends of its port.
type VLAN struct {
	ID        uint16
	NetworkID uint32
	Uplink    int // ifindex of the uplink
	Dev       int // ifindex of the node's L3 device on the VLAN (xlvl<VID>)
	Port      int // ifindex of its peer, where the tag is pushed (xlvp<VID>)
}

const vlanPortSuffix = "vlanport"

// PutVLAN attaches the port's program (adopting a pinned link of its own)
// and tells the uplink's programs about the VLAN.
func (d *BPF) PutVLAN(v VLAN, portName string) error {
	if err := d.attachHook(portName, v.Port, hook{vlanPortSuffix, "tcx", ebpf.AttachTCXIngress, 0, (*bpf.Objects).ToVLAN}); err != nil {
		return err
	}
	vid := uint32(v.ID)
	val := bpf.VlanVal{NetworkId: v.NetworkID, Dev: uint32(v.Dev), Port: uint32(v.Port), Uplink: uint32(v.Uplink)}
	if err := d.objs.VLANs().Put(&vid, &val); err != nil {
		return fmt.Errorf("put vlan %d: %w", v.ID, err)
	}
	for _, ifindex := range []int{v.Dev, v.Port} {
		k := uint32(ifindex)
		if err := d.objs.VLANDev().Put(&k, &vid); err != nil {
			return fmt.Errorf("put vlan %d device %d: %w", v.ID, ifindex, err)
		}
	}
	return nil
}

// DeleteVLAN removes what PutVLAN made; missing parts are fine.
func (d *BPF) DeleteVLAN(id uint16, portName string) error {
	vid := uint32(id)
	var val bpf.VlanVal
	var errs []error
	if err := d.objs.VLANs().Lookup(&vid, &val); err == nil {
		for _, ifindex := range []uint32{val.Dev, val.Port} {
			if err := d.objs.VLANDev().Delete(&ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("delete vlan %d device %d: %w", id, ifindex, err))
			}
		}
		if err := d.objs.VLANs().Delete(&vid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete vlan %d: %w", id, err))
		}
	}
	errs = append(errs, d.detachHook(portName, hook{suffix: vlanPortSuffix, kind: "tcx", attach: ebpf.AttachTCXIngress}))
	return errors.Join(errs...)
}

// VLANs lists the VLANs the programs know.
func (d *BPF) VLANs() ([]VLAN, error) {
	var out []VLAN
	var k uint32
	var v bpf.VlanVal
	it := d.objs.VLANs().Iterate()
	for it.Next(&k, &v) {
		out = append(out, VLAN{ID: uint16(k), NetworkID: v.NetworkId, Uplink: int(v.Uplink), Dev: int(v.Dev), Port: int(v.Port)})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list vlans: %w", err)
	}
	return out, nil
}
