package datapath

import (
	"errors"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// Neigh returns the MAC xlane_neigh holds for a next hop; ok is false when
// it holds none.
func (d *BPF) Neigh(addr netip.Addr, ifindex int) (mac net.HardwareAddr, ok bool, err error) {
	k := bpf.NeighKey{Addr: addr.As16(), Ifindex: uint32(ifindex)}
	var v bpf.NeighVal
	if err := d.objs.Neigh().Lookup(&k, &v); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	return net.HardwareAddr(v.Mac[:]), true, nil
}
