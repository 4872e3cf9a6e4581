package netconf

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// EnsureNetkit creates the endpoint's netkit pair unless its primary (the
// host side) exists, and returns the primary. It fills in e.HostMAC and,
// while the peer is still in the node's namespace, e.MAC (all zeros in L3
// mode, where the pair has no link-layer addresses).
//
// With blackhole, both directions drop everything until a BPF program is
// attached (netkit's default policy applies only while no program is):
// traffic never flows unfiltered before xlane's programs are in place.
// Without it (kernel mode) the pair forwards like a veth.
func EnsureNetkit(e *model.Endpoint, mtu int, dev model.DeviceType, blackhole bool) (netlink.Link, error) {
	host, err := netlink.LinkByName(e.HostIf)
	if isNotFound(err) {
		mode := netlink.NETKIT_MODE_L3
		if dev == model.DeviceNetkitL2 {
			mode = netlink.NETKIT_MODE_L2
		}
		policy := netlink.NETKIT_POLICY_FORWARD
		if blackhole {
			policy = netlink.NETKIT_POLICY_BLACKHOLE
		}
		nk := &netlink.Netkit{
			LinkAttrs: netlink.LinkAttrs{Name: e.HostIf, MTU: mtu},
			Mode:      mode, Policy: policy, PeerPolicy: policy,
			Scrub: netlink.NETKIT_SCRUB_DEFAULT, PeerScrub: netlink.NETKIT_SCRUB_DEFAULT,
		}
		nk.SetPeerAttrs(&netlink.LinkAttrs{Name: e.PeerIf, MTU: mtu})
		if err := netlink.LinkAdd(nk); err != nil {
			return nil, fmt.Errorf("create netkit pair %s: %w", e.HostIf, err)
		}
		host, err = netlink.LinkByName(e.HostIf)
	}
	if err != nil {
		return nil, fmt.Errorf("find netkit %s: %w", e.HostIf, err)
	}
	if host.Type() != "netkit" {
		return nil, model.Conflictf("device %s exists and is a %s, not xlane's netkit", e.HostIf, host.Type())
	}
	e.HostMAC = macString(host)
	if peer, err := netlink.LinkByName(e.PeerIf); err == nil {
		e.MAC = macString(peer)
	}
	return host, nil
}

// macString is a link's MAC; netkit L3 devices have none and count as
// all zeros, which is also what their Ethernet headers carry.
func macString(l netlink.Link) string {
	if hw := l.Attrs().HardwareAddr; len(hw) == 6 {
		return hw.String()
	}
	return "00:00:00:00:00:00"
}
