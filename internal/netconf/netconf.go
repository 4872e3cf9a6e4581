package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/model"
)

// GatewayV6 is the link-local router address every host veth carries.
var GatewayV6 = netip.MustParseAddr("fe80::1")

// ResolveNetns turns a namespace name (as in `ip netns`) or a path into a
// path, and checks that it is a network namespace an endpoint may get
// (checkEndpointNetns).
func ResolveNetns(s string) (string, error) {
	p := s
	if !strings.Contains(s, "/") {
		p = filepath.Join("/var/run/netns", s)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return "", model.Fieldf("netns", "%q: no such network namespace", s)
	}
	if st.Type != unix.NSFS_MAGIC {
		return "", model.Fieldf("netns", "%q: not a network namespace (nsfs) file", s)
	}
	if err := checkEndpointNetns(p, s); err != nil {
		return "", err
	}
	return p, nil
}

// CheckIfNameFree fails when ifname already exists in the namespace at path.
func CheckIfNameFree(path, ifname string) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in netns %s: %w", path, err)
	}
	defer h.Close()
	if _, err := h.LinkByName(ifname); err == nil {
		return model.Conflictf("ifname %q already exists in netns %s", ifname, path)
	}
	return nil
}

func sysctl(path, val string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", path), []byte(val), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(path, "/", "."), val, err)
	}
	return nil
}

func prefixOf(a netip.Addr) *net.IPNet {
	bits := 32
	if a.Is6() {
		bits = 128
	}
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// EnsureNetwork puts the network's gateway addresses on the node's
// loopback (IPv4 ones labelled lo:<device> so `ip addr` shows whose they
// are) and adds an unreachable route per subnet, so addresses without an
// endpoint are refused on the node instead of leaking off it. Loopback
// rather than a dummy device: it exists on every kernel (dummy is a module
// that is not always there), and a local address is answered for on every
// host veth (ARP) or reached through fe80::1 (IPv6) all the same. Both
// carry xlane's mark (mark.go), so that a crash before the network's
// record is stored leaves nothing the next start cannot find.
func EnsureNetwork(n *model.Network) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	for i, gw := range n.Gateways {
		addr := gatewayAddr(n, gw)
		if gw.Is6() {
			if err := sysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
				return err
			}
		}
		if err := addrReplaceMarked(lo, addr); err != nil {
			return fmt.Errorf("add gateway %s to lo: %w", gw, err)
		}
		// A VLAN network's subnets are on its VLAN (EnsureVLAN).
		if n.VLAN != 0 {
			continue
		}
		if err := addUnreachable(n.Subnets[i]); err != nil {
			return err
		}
	}
	return nil
}

func gatewayAddr(n *model.Network, gw netip.Addr) *netlink.Addr {
	a := &netlink.Addr{IPNet: prefixOf(gw)}
	if gw.Is4() {
		a.Label = "lo:" + n.Device
	} else {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// DeleteNetwork removes what EnsureNetwork created, and nothing else: a
// route at a subnet that is not xlane's unreachable route stays. Missing
// parts are fine.
func DeleteNetwork(n *model.Network) error {
	for _, p := range n.Subnets {
		if err := delUnreachable(p); err != nil {
			return err
		}
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	for _, gw := range n.Gateways {
		err := netlink.AddrDel(lo, gatewayAddr(n, gw))
		if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete gateway %s from lo: %w", gw, err)
		}
	}
	return nil
}

// ensureVethPair returns the host end of v (v.Name), creating the pair
// unless a device of that name exists; one that is not a veth is a
// conflict.
func ensureVethPair(v *netlink.Veth) (netlink.Link, error) {
	host, err := netlink.LinkByName(v.Name)
	if isNotFound(err) {
		if err := netlink.LinkAdd(v); err != nil {
			return nil, fmt.Errorf("create veth %s: %w", v.Name, err)
		}
		host, err = netlink.LinkByName(v.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("find veth %s: %w", v.Name, err)
	}
	if host.Type() != "veth" {
		return nil, model.Conflictf("device %s exists and is a %s, not xlane's veth", v.Name, host.Type())
	}
	return host, nil
}

// EnsureVeth creates the endpoint's veth pair unless its host side exists.
// It returns the host side and fills in e.HostMAC and, when the peer is
// still in the node's namespace, e.MAC.
func EnsureVeth(e *model.Endpoint, mtu int) (netlink.Link, error) {
	host, err := ensureVethPair(&netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: e.HostIf, MTU: mtu},
		PeerName:  e.PeerIf,
	})
	if err != nil {
		return nil, err
	}
	e.HostMAC = host.Attrs().HardwareAddr.String()
	if peer, err := netlink.LinkByName(e.PeerIf); err == nil {
		e.MAC = peer.Attrs().HardwareAddr.String()
	}
	return host, nil
}

// ConfigureHost sets up the host side of an endpoint: forwarding and proxy
// ARP on the veth, fe80::1 for IPv6, a host route and a permanent neighbour
// entry per endpoint address.
func ConfigureHost(e *model.Endpoint, host netlink.Link) error {
	name := host.Attrs().Name
	if err := sysctl("net/ipv4/conf/"+name+"/forwarding", "1"); err != nil {
		return err
	}
	// Runtimes that give the container an on-link subnet (Docker) make it
	// ARP for its peers directly; proxy ARP answers for them.
	if err := sysctl("net/ipv4/conf/"+name+"/proxy_arp", "1"); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return fmt.Errorf("endpoint %s mac %q: %w", e.ID, e.MAC, err)
	}
	for _, a := range e.IPs {
		if a.Is6() {
			if err := sysctl("net/ipv6/conf/"+name+"/forwarding", "1"); err != nil {
				return err
			}
			ll := &netlink.Addr{IPNet: &net.IPNet{IP: GatewayV6.AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
			if err := netlink.AddrReplace(host, ll); err != nil {
				return fmt.Errorf("add %s to %s: %w", GatewayV6, name, err)
			}
		}
		r := &netlink.Route{LinkIndex: host.Attrs().Index, Dst: prefixOf(a), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("add route %s dev %s: %w", a, name, err)
		}
		family := netlink.FAMILY_V4
		if a.Is6() {
			family = netlink.FAMILY_V6
		}
		n := &netlink.Neigh{
			LinkIndex: host.Attrs().Index, Family: family, State: netlink.NUD_PERMANENT,
			IP: a.AsSlice(), HardwareAddr: mac,
		}
		if err := netlink.NeighSet(n); err != nil {
			return fmt.Errorf("add neighbour %s lladdr %s dev %s: %w", a, mac, name, err)
		}
	}
	return nil
}

// ConfigureContainer moves the peer into the endpoint's namespace (unless it
// is there already), names it, and sets MTU, addresses and routes. It fills
// in e.MAC.
func ConfigureContainer(e *model.Endpoint, n *model.Network) error {
	ns, err := netns.GetFromPath(e.Netns)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", e.Netns, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in netns %s: %w", e.Netns, err)
	}
	defer h.Close()

	link, err := h.LinkByName(e.IfName)
	if isNotFound(err) {
		peer, perr := netlink.LinkByName(e.PeerIf)
		if perr != nil {
			return fmt.Errorf("find veth peer %s: %w", e.PeerIf, perr)
		}
		if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
			return fmt.Errorf("move %s into netns %s: %w", e.PeerIf, e.Netns, err)
		}
		moved, merr := h.LinkByName(e.PeerIf)
		if merr != nil {
			return fmt.Errorf("find %s in netns %s: %w", e.PeerIf, e.Netns, merr)
		}
		if err := h.LinkSetName(moved, e.IfName); err != nil {
			return fmt.Errorf("rename %s to %s in netns %s: %w", e.PeerIf, e.IfName, e.Netns, err)
		}
		link, err = h.LinkByName(e.IfName)
	}
	if err != nil {
		return fmt.Errorf("find %s in netns %s: %w", e.IfName, e.Netns, err)
	}
	e.MAC = macString(link) // netkit L3 devices have none: zeros
	if err := h.LinkSetMTU(link, n.MTU); err != nil {
		return fmt.Errorf("set mtu %d on %s: %w", n.MTU, e.IfName, err)
	}
	for _, a := range e.IPs {
		bits := n.Subnets[0].Bits()
		for _, p := range n.Subnets {
			if p.Contains(a) {
				bits = p.Bits()
			}
		}
		addr := &netlink.Addr{
			IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())},
			Flags: unix.IFA_F_NOPREFIXROUTE | unix.IFA_F_NODAD,
		}
		if err := h.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("add address %s to %s: %w", a, e.IfName, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", e.IfName, err)
	}
	if lo, err := h.LinkByName("lo"); err == nil {
		if err := h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
	}
	return containerRoutes(h, link.Attrs().Index, e, n)
}

func containerRoutes(h *netlink.Handle, ifindex int, e *model.Endpoint, n *model.Network) error {
	var routes []*netlink.Route
	if p, gw, ok := n.Subnet4(); ok && hasFamily(e.IPs, true) {
		routes = append(routes,
			&netlink.Route{LinkIndex: ifindex, Dst: prefixOf(gw), Scope: netlink.SCOPE_LINK},
			&netlink.Route{LinkIndex: ifindex, Dst: ipnet(p), Gw: gw.AsSlice()},
		)
		if !hasDefault(h, netlink.FAMILY_V4, ifindex) {
			routes = append(routes, &netlink.Route{LinkIndex: ifindex, Gw: gw.AsSlice(), Dst: ipnet(netip.MustParsePrefix("0.0.0.0/0"))})
		}
	}
	if p, _, ok := n.Subnet6(); ok && hasFamily(e.IPs, false) {
		routes = append(routes, &netlink.Route{LinkIndex: ifindex, Dst: ipnet(p), Gw: GatewayV6.AsSlice()})
		if !hasDefault(h, netlink.FAMILY_V6, ifindex) {
			routes = append(routes, &netlink.Route{LinkIndex: ifindex, Gw: GatewayV6.AsSlice(), Dst: ipnet(netip.MustParsePrefix("::/0"))})
		}
	}
	for _, r := range routes {
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("add route %v via %v in netns %s: %w", r.Dst, r.Gw, e.Netns, err)
		}
	}
	return nil
}

func hasFamily(addrs []netip.Addr, v4 bool) bool {
	for _, a := range addrs {
		if a.Is4() == v4 {
			return true
		}
	}
	return false
}

// hasDefault reports whether another interface already owns the default
// route (a container on two networks keeps its first default route).
func hasDefault(h *netlink.Handle, family, ifindex int) bool {
	routes, err := retryDump(func() ([]netlink.Route, error) { return h.RouteList(nil, family) })
	if err != nil {
		return false
	}
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) && r.LinkIndex != ifindex {
			return true
		}
	}
	return false
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

// retryDump retries a netlink dump the kernel interrupted (NLM_F_DUMP_INTR).
func retryDump[T any](f func() ([]T, error)) ([]T, error) {
	var (
		out []T
		err error
	)
	for i := 0; i < 5; i++ {
		out, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}

// DeleteVeth deletes the endpoint's veth pair (the peer goes with it, and
// with them every route and neighbour entry on them). Missing is fine.
func DeleteVeth(e *model.Endpoint) error {
	for _, name := range []string{e.HostIf, e.PeerIf} {
		if name == "" { // a VM's tap has no peer
			continue
		}
		link, err := netlink.LinkByName(name)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("find %s: %w", name, err)
		}
		// ENODEV: gone since the lookup (its namespace was torn down,
		// the peer's deletion took it): what was asked.
		if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
	}
	return nil
}

// HostLink returns the endpoint's host-side veth, or model.ErrNotFound.
func HostLink(e *model.Endpoint) (netlink.Link, error) {
	l, err := netlink.LinkByName(e.HostIf)
	if isNotFound(err) {
		return nil, model.NotFoundf("veth %s", e.HostIf)
	}
	return l, err
}

// WaitHostUp waits up to timeout for the operational state of the
// endpoint's host-side device to be up, and reports whether it is. The
// kernel turns a veth's carrier on when both ends are up, but publishes the
// operational state later, from its link watch work.
func WaitHostUp(e *model.Endpoint, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		l, err := HostLink(e)
		if err != nil {
			return false
		}
		if s := l.Attrs().OperState; s == netlink.OperUp || s == netlink.OperUnknown {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inContainerSide runs fn with the name of the endpoint's container-side
// veth, in the namespace where it is: the node's while the peer has not been
// moved, else the endpoint's netns. A veth-only endpoint whose runtime has
// moved the peer is out of reach: ErrPeerUnreachable.
func inContainerSide(e *model.Endpoint, fn func(ifname string) error) error {
	if _, err := netlink.LinkByName(e.PeerIf); err == nil {
		return fn(e.PeerIf)
	}
	if e.VethOnly() {
		return ErrPeerUnreachable
	}
	return ns.WithNetNSPath(e.Netns, func(ns.NetNS) error { return fn(e.IfName) })
}

// ErrPeerUnreachable: the runtime moved a veth-only endpoint's peer into a
// namespace xlane does not know.
var ErrPeerUnreachable = errors.New("container side moved by the runtime into an unknown namespace")

// SetContainerGRO switches GRO on the container-side veth. GRO gives that
// veth NAPI, which XDP_REDIRECT into its host side needs: without it the
// redirected frames are dropped (only xdp:xdp_redirect_err shows it).
func SetContainerGRO(e *model.Endpoint, on bool) error {
	return inContainerSide(e, func(ifname string) error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("ethtool: %w", err)
		}
		defer et.Close()
		if err := et.Change(ifname, map[string]bool{"rx-gro": on}); err != nil {
			return fmt.Errorf("set rx-gro=%v on %s: %w", on, ifname, err)
		}
		return nil
	})
}

// ContainerOffloads reports the offload features of the container-side veth
// that matter to the datapath.
func ContainerOffloads(e *model.Endpoint) (map[string]bool, error) {
	out := map[string]bool{}
	err := inContainerSide(e, func(ifname string) error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		f, err := et.Features(ifname)
		if err != nil {
			return err
		}
		for _, k := range []string{"rx-gro", "tx-checksum-ip-generic", "tx-tcp-segmentation", "tx-tcp6-segmentation"} {
			out[k] = f[k]
		}
		return nil
	})
	return out, err
}
