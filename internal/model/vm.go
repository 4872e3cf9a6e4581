package model

import "fmt"

// MaxVMQueues bounds --queues: QEMU's virtio-net takes up to 1024 queue
// pairs, but every queue is a file QEMU holds open and two MSI-X vectors.
const MaxVMQueues = 64

// QEMUArgs are the QEMU options that put a guest on a VM endpoint: the
// tap by name (xlane owns it; script=no keeps QEMU from configuring it),
// no vhost (the tap's tc programs run either way; vhost-net needs
// /dev/vhost-net, which not every node has), and the endpoint's MAC, which
// anti-spoofing checks. Nil for other endpoints.
func (e *Endpoint) QEMUArgs(id string) []string {
	if !e.VM {
		return nil
	}
	netdev := fmt.Sprintf("tap,id=%s,ifname=%s,script=no,downscript=no,vhost=off", id, e.HostIf)
	dev := fmt.Sprintf("virtio-net-pci,netdev=%s,mac=%s", id, e.MAC)
	if e.Queues > 1 {
		netdev += fmt.Sprintf(",queues=%d", e.Queues)
		dev += fmt.Sprintf(",mq=on,vectors=%d", 2*e.Queues+2)
	}
	return []string{"-netdev", netdev, "-device", dev}
}
