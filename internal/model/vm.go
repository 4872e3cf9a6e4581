package model

import "fmt"

// MaxVMQueues bounds --queues: QEMU's virtio-net takes up to 1024 queue
// pairs, but every queue is a file QEMU holds open and two MSI-X vectors.
// An AF_XDP port's socket map has as many slots (bpf/lib/xsk.h).
const MaxVMQueues = 64

// VM endpoint backends (Endpoint.Backend; "" is the tap).
const (
	BackendTap   = "tap"
	BackendAFXDP = "af-xdp"
)

// AFXDP reports whether the endpoint is a VM's AF_XDP port.
func (e *Endpoint) AFXDP() bool { return e.VM && e.Backend == BackendAFXDP }

// QEMUArgs are the QEMU options that put a guest on a VM endpoint, nil for
// other endpoints. A tap by name (xlane owns it; script=no keeps QEMU from
// configuring it), no vhost (the tap's tc programs run either way;
// vhost-net needs /dev/vhost-net, which not every node has). An AF_XDP
// port by name, with inhibit=on (QEMU loads no XDP program: xlane's is
// there) and map-path= (QEMU puts its sockets into xlane's pinned map;
// QEMU >= 10.1). Both with the endpoint's MAC, which anti-spoofing checks.
func (e *Endpoint) QEMUArgs(id string) []string {
	if !e.VM {
		return nil
	}
	netdev := fmt.Sprintf("tap,id=%s,ifname=%s,script=no,downscript=no,vhost=off", id, e.HostIf)
	if e.AFXDP() {
		netdev = fmt.Sprintf("af-xdp,id=%s,ifname=%s,inhibit=on,map-path=%s", id, e.PeerIf, e.XSKMap)
	}
	dev := fmt.Sprintf("virtio-net-pci,netdev=%s,mac=%s", id, e.MAC)
	if e.Queues > 1 {
		netdev += fmt.Sprintf(",queues=%d", e.Queues)
		dev += fmt.Sprintf(",mq=on,vectors=%d", 2*e.Queues+2)
	}
	return []string{"-netdev", netdev, "-device", dev}
}
