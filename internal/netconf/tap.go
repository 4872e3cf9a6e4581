package netconf

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// EnsureTap creates a VM endpoint's tap unless it exists, and returns it.
// The tap is persistent (it outlives xlaned and waits for QEMU, which
// opens it by name), owned by root, with virtio-net headers (QEMU passes
// checksum and segmentation offloads through them) and, for more than one
// queue, multi-queue: QEMU opens one file per queue and must ask for the
// same queue mode the device was created with. It fills in e.HostMAC; the
// guest's MAC (e.MAC) is the endpoint's, given to QEMU.
func EnsureTap(e *model.Endpoint, mtu int) (netlink.Link, error) {
	host, err := netlink.LinkByName(e.HostIf)
	if isNotFound(err) {
		t := &netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: e.HostIf},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
		}
		if e.Queues > 1 {
			t.Flags |= netlink.TUNTAP_MULTI_QUEUE
		}
		// Queues 1 even for the single-queue tap: with 0 the library
		// replaces our flags by its defaults. The files it opens are
		// closed right away: the tap persists without them.
		t.Queues = 1
		err = netlink.LinkAdd(t)
		for _, f := range t.Fds {
			f.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("create tap %s: %w", e.HostIf, err)
		}
		host, err = netlink.LinkByName(e.HostIf)
	}
	if err != nil {
		return nil, fmt.Errorf("find tap %s: %w", e.HostIf, err)
	}
	if host.Type() != "tuntap" {
		return nil, model.Conflictf("device %s exists and is a %s, not xlane's tap", e.HostIf, host.Type())
	}
	if host.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(host, mtu); err != nil {
			return nil, fmt.Errorf("set mtu %d on %s: %w", mtu, e.HostIf, err)
		}
	}
	e.HostMAC = host.Attrs().HardwareAddr.String()
	return host, nil
}
