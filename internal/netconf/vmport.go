package netconf

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// EnsurePort creates the veth pair of a VM's AF_XDP port unless its host
// end exists, and returns the host end. The host end (e.HostIf) carries the
// endpoint's programs like a container's host veth; the port end (e.PeerIf)
// stays in the node's namespace, where QEMU binds its AF_XDP sockets, one
// per queue (both ends get e.Queues queues). The port end gets the guest's
// MAC, no IPv6 (the node would send its own solicitations into the guest)
// and is up. It fills in e.HostMAC; e.MAC stays the guest's.
func EnsurePort(e *model.Endpoint, mtu int) (netlink.Link, error) {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s mac %q: %w", e.ID, e.MAC, err)
	}
	q := max(e.Queues, 1)
	host, err := ensureVethPair(&netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: e.HostIf, MTU: mtu, NumTxQueues: q, NumRxQueues: q},
		PeerName:  e.PeerIf, PeerHardwareAddr: mac, PeerMTU: uint32(mtu),
		PeerNumTxQueues: uint32(q), PeerNumRxQueues: uint32(q),
	}) // netconf.go
	if err != nil {
		return nil, err
	}
	port, err := netlink.LinkByName(e.PeerIf)
	if err != nil {
		return nil, fmt.Errorf("find port %s: %w", e.PeerIf, err)
	}
	if err := sysctl("net/ipv6/conf/"+e.PeerIf+"/disable_ipv6", "1"); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(port); err != nil {
		return nil, fmt.Errorf("set %s up: %w", e.PeerIf, err)
	}
	e.HostMAC = host.Attrs().HardwareAddr.String()
	return host, nil
}

// PortSockets lists the AF_XDP sockets bound to the device ifindex (sock
// diag; the kernel loads xsk_diag on demand), for inspect: QEMU's, one
// per queue, once the guest runs.
func PortSockets(ifindex int) ([]netlink.XDPInfo, error) {
	all, err := netlink.SocketDiagXDP()
	if err != nil {
		return nil, fmt.Errorf("list AF_XDP sockets: %w", err)
	}
	var out []netlink.XDPInfo
	for _, s := range all {
		if s.XDPInfo != nil && int(s.XDPInfo.Ifindex) == ifindex {
			out = append(out, *s.XDPInfo)
		}
	}
	return out, nil
}
