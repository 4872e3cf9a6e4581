package daemon

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// usableNeigh are the neighbour states whose MAC the XDP datapath may use.
// STALE and DELAY entries still hold a MAC the kernel itself sends to.
const usableNeigh = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// syncNeighbours mirrors the node's neighbour table (ARP and ND) into
// xlane_neigh until done closes: the XDP datapath cannot resolve neighbours
// itself, so on a miss it passes the packet to Linux, whose resolution then
// arrives here as an event and fills the map for the following packets.
func (d *Daemon) syncNeighbours(done <-chan struct{}) error {
	if err := d.dp.FlushNeigh(); err != nil {
		return err
	}
	ch := make(chan netlink.NeighUpdate, 1024)
	err := netlink.NeighSubscribeWithOptions(ch, done, netlink.NeighSubscribeOptions{
		ListExisting:  true,
		ErrorCallback: func(err error) { d.log.Warn("neighbour events", "err", err) },
	})
	if err != nil {
		return err
	}
	go func() {
		for u := range ch {
			d.applyNeigh(u)
		}
	}()
	return nil
}

func (d *Daemon) applyNeigh(u netlink.NeighUpdate) {
	n := u.Neigh
	if n.Flags&netlink.NTF_PROXY != 0 || (n.Family != unix.AF_INET && n.Family != unix.AF_INET6) {
		return
	}
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return
	}
	addr = addr.Unmap()
	var err error
	if u.Type == unix.RTM_NEWNEIGH && n.State&usableNeigh != 0 && len(n.HardwareAddr) == 6 {
		err = d.dp.PutNeigh(addr, n.LinkIndex, net.HardwareAddr(n.HardwareAddr))
	} else {
		err = d.dp.DeleteNeigh(addr, n.LinkIndex)
	}
	if err != nil {
		d.log.Warn("mirror neighbour", "addr", addr, "ifindex", n.LinkIndex, "err", err)
	}
}
