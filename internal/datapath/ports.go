package datapath

import (
	"errors"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// Port is a published port: node port -> endpoint address and port.
type Port struct {
	Proto    uint8 // unix.IPPROTO_TCP or IPPROTO_UDP
	NodePort uint16
	Addr     netip.Addr
	Port     uint16
	// HostIP is the one host address it is published on; the zero
	// Addr: every node address (bpf/lib/publish.h).
	HostIP netip.Addr
}

func publishKey(p Port) bpf.PublishKey {
	fam := uint8(6)
	if p.Addr.Is4() {
		fam = 4
	}
	k := bpf.PublishKey{Port: htons(p.NodePort), Proto: p.Proto, Family: fam}
	if p.HostIP.IsValid() {
		k.Addr = p.HostIP.As16()
	}
	return k
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
		p := Port{Proto: k.Proto, NodePort: ntohs(k.Port), Addr: netip.AddrFrom16(v.Addr).Unmap(), Port: ntohs(v.Port)}
		if k.Addr != ([16]byte{}) {
			p.HostIP = netip.AddrFrom16(k.Addr).Unmap()
		}
		out = append(out, p)
	}
	return out, it.Err()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
func ntohs(v uint16) uint16 { return htons(v) }
