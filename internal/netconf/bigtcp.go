package netconf

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// BigTCPSize is the GSO/GRO size of an endpoint device with BIG TCP on:
// three 64 KiB aggregates, the size Cilium and the kernel's BIG TCP tests
// use. Off is the classic 64 KiB.
const (
	BigTCPSize = 192 << 10
	gsoClassic = 64 << 10
)

// SetBigTCP sets both sides of an endpoint's veth to aggregate up to
// BigTCPSize (on) or 64 KiB (off) per family: gso_max_size and
// gro_max_size for IPv6, gso_ipv4_max_size and gro_ipv4_max_size for IPv4
// (6.3+). The sender's device caps the segments TCP builds; the forwarding
// and receiving devices must let them through unsplit.
func SetBigTCP(e *model.Endpoint, host netlink.Link, v4, v6 bool) error {
	if err := setBigTCP(host, v4, v6); err != nil {
		return err
	}
	return inContainerSide(e, func(ifname string) error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("find %s: %w", ifname, err)
		}
		return setBigTCP(l, v4, v6)
	})
}

func setBigTCP(l netlink.Link, v4, v6 bool) error {
	size := func(on bool) int {
		if on {
			return BigTCPSize
		}
		return gsoClassic
	}
	name := l.Attrs().Name
	for _, s := range []struct {
		attr string
		on   bool
		set  func(netlink.Link, int) error
		get  func(*netlink.LinkAttrs) uint32
	}{
		{"gso_max_size", v6, netlink.LinkSetGSOMaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GSOMaxSize }},
		{"gro_max_size", v6, netlink.LinkSetGROMaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GROMaxSize }},
		{"gso_ipv4_max_size", v4, netlink.LinkSetGSOIPv4MaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GSOIPv4MaxSize }},
		{"gro_ipv4_max_size", v4, netlink.LinkSetGROIPv4MaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GROIPv4MaxSize }},
	} {
		want := size(s.on)
		if s.get(l.Attrs()) == uint32(want) {
			continue
		}
		if err := s.set(l, want); err != nil {
			if !s.on {
				// Off on a kernel without the attribute: nothing to undo.
				continue
			}
			return fmt.Errorf("set %s %d on %s: %w", s.attr, want, name, err)
		}
	}
	return nil
}
