package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/services"
)

// DefaultNATPorts is masquerade's source-port range: above Linux's default
// ip_local_port_range (32768-60999), so SNAT never picks a port the node's
// own connections may use.
const DefaultNATPorts = "61000-65535"

// parsePortRange reads "MIN-MAX" and checks it against the node's
// ephemeral range.
func parsePortRange(s string) (uint16, uint16, error) {
	lo, hi, ok := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(lo, 10, 16)
	b, err2 := strconv.ParseUint(hi, 10, 16)
	if !ok || err1 != nil || err2 != nil || a == 0 || a > b {
		return 0, 0, model.Fieldf("nat-ports", "%q: want MIN-MAX, 1 <= MIN <= MAX <= 65535", s)
	}
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		f := strings.Fields(string(raw))
		if len(f) == 2 {
			el, _ := strconv.Atoi(f[0])
			eh, _ := strconv.Atoi(f[1])
			if int(a) <= eh && int(b) >= el {
				return 0, 0, model.Fieldf("nat-ports", "%q: overlaps the node's ip_local_port_range %d-%d: masquerade could take a port the node's own connections use", s, el, eh)
			}
		}
	}
	return uint16(a), uint16(b), nil
}

// setupNode writes the datapath's node configuration (uplink, masquerade
// addresses and ports) and attaches the uplink's tc program.
func (d *Daemon) setupNode() error {
	lo, hi, err := parsePortRange(d.cfg.NATPorts)
	if err != nil {
		return err
	}
	nc := datapath.NodeConfig{NATPortMin: lo, NATPortMax: hi}
	if nc.NoBackendReject, err = services.ParseNoBackend(d.cfg.ServiceNoBackend); err != nil {
		return err
	}
	if d.cfg.Uplink != "" {
		l, err := netlink.LinkByName(d.cfg.Uplink)
		if err != nil {
			return fmt.Errorf("uplink %q: %w", d.cfg.Uplink, err)
		}
		nc.UplinkIfindex = l.Attrs().Index
		nc.MasqV4, nc.MasqV6 = uplinkAddrs(l)
		if err := d.dp.AttachUplinkTC(d.cfg.Uplink, l.Attrs().Index); err != nil {
			return err
		}
	}
	if nc.NetnsCookie, err = netnsCookie(); err != nil {
		d.log.Warn("no netns cookie: the node's own processes will not reach services or published ports", "err", err)
	}
	d.node = nc
	if err := d.dp.SetConfig(nc); err != nil {
		return err
	}
	var sockErr error
	if nc.NetnsCookie != 0 {
		root, err := cgroup2Root()
		if err == nil {
			err = d.dp.AttachSockLB(root)
		}
		if err != nil {
			d.log.Warn("socket load balancing off: the node's own processes will not reach services or published ports", "err", err)
			sockErr = fmt.Errorf("off, the node's own processes reach no service or published port: %w", err)
		}
	}
	// The health summary says so for as long as it lasts.
	d.objErrs.set(objNode, "socket load balancing", sockErr)
	return nil
}

// netnsCookie is the cookie of the daemon's network namespace
// (SO_NETNS_COOKIE, Linux 5.14+).
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
}

// cgroup2Root finds where the cgroup2 hierarchy is mounted.
func cgroup2Root() (string, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup2 mount")
}

// uplinkAddrs picks the uplink's first global IPv4 and IPv6 addresses.
func uplinkAddrs(l netlink.Link) (v4, v6 netip.Addr) {
	addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Scope != unix.RT_SCOPE_UNIVERSE {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() && !v4.IsValid() {
			v4 = ip
		} else if ip.Is6() && !v6.IsValid() {
			v6 = ip
		}
	}
	return v4, v6
}
