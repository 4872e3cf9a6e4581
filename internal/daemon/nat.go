package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// DefaultNATPorts is masquerade's source-port range: above Linux's default
// ip_local_port_range (32768-60999), so SNAT never picks a port the node's
// own connections may use.
const DefaultNATPorts = "61000-65535"

// ctGrace is how long past its deadline an entry survives the GC.
const ctGrace = 10 * time.Second

type ctCounters struct {
	gcRuns, gcDeleted atomic.Uint64
}

// parseAddrPort reads IP:PORT ([v6]:PORT), unmapping IPv4.
func parseAddrPort(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("bad address and port %q", s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

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

// natSupported refuses NAT (masquerade, published ports) where the
// datapath cannot do it: in kernel mode there is no BPF to do it. (Generic
// XDP hands NAT flows to the tc program behind it, as native XDP does:
// refused here until the generic programs lost xdp.frags, whose skb copy
// hid the MAC header from that tc program; issue 11.)
func natSupported(mode model.Mode, nat bool) error {
	if !nat {
		return nil
	}
	if mode == model.ModeKernel {
		return model.Fieldf("masquerade", "kernel mode has no NAT (plain routing): use a BPF mode or --masquerade=false")
	}
	return nil
}

// setupNode writes the datapath's node configuration (uplink, masquerade
// addresses and ports) and attaches the uplink's tc program.
func (d *Daemon) setupNode() error {
	lo, hi, err := parsePortRange(d.cfg.NATPorts)
	if err != nil {
		return err
	}
	nc := datapath.NodeConfig{NATPortMin: lo, NATPortMax: hi}
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
	if nc.NetnsCookie != 0 {
		root, err := cgroup2Root()
		if err == nil {
			err = d.dp.AttachSockLB(root)
		}
		if err != nil {
			d.log.Warn("socket load balancing off: the node's own processes will not reach services or published ports", "err", err)
		}
	}
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

// gcLoop collects expired conntrack entries every interval until done.
func (d *Daemon) gcLoop(interval time.Duration, done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			n, err := d.dp.GCCT(uint64(ctGrace))
			d.ct.gcRuns.Add(1)
			d.ct.gcDeleted.Add(uint64(n))
			if err != nil {
				d.log.Warn("conntrack gc", "err", err)
			}
		}
	}
}

func protoNumber(p string) uint8 {
	if p == "udp" {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}

func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}

// portEntries lists the datapath entries of e's published ports: one per
// address family the endpoint has.
func portEntries(e *model.Endpoint) []datapath.Port {
	var out []datapath.Port
	for _, pm := range e.Ports {
		for _, a := range e.IPs {
			out = append(out, datapath.Port{Proto: protoNumber(pm.Proto), NodePort: pm.NodePort, Addr: a, Port: pm.Port})
		}
	}
	return out
}

// PublishPorts publishes (or, with withdraw, withdraws) ports of an
// endpoint. A node port another endpoint publishes is a conflict.
func (d *Daemon) PublishPorts(id string, req api.PortsUpdate, withdraw bool) (*model.Endpoint, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dp == nil {
		return nil, fmt.Errorf("published ports need the BPF datapath: %v: %w", d.dpErr, model.ErrUnavailable)
	}
	var e *model.Endpoint
	err := d.store.Update(func(tx *store.Tx) error {
		var err error
		if e, err = tx.Endpoint(id); err != nil {
			return err
		}
		n, err := tx.Network(e.Network)
		if err != nil {
			return err
		}
		if !withdraw {
			if err := natSupported(n.Mode, true); err != nil {
				return fmt.Errorf("network %q: published ports: %w", n.Name, err)
			}
			if err := deviceNAT(n); err != nil { // kernel.go
				return fmt.Errorf("network %q: published ports: %w", n.Name, err)
			}
		}
		all, err := tx.Endpoints()
		if err != nil {
			return err
		}
		if len(req.Ports) == 0 {
			return model.Fieldf("port", "missing: give NODEPORT:PORT[/tcp|udp]")
		}
		old := portEntries(e)
		for _, s := range req.Ports {
			pm, err := model.ParsePortMapping(s)
			if err != nil {
				return err
			}
			idx := slices.IndexFunc(e.Ports, func(x model.PortMapping) bool { return x.NodePort == pm.NodePort && x.Proto == pm.Proto })
			if withdraw {
				if idx >= 0 {
					e.Ports = slices.Delete(e.Ports, idx, idx+1)
				}
				continue
			}
			for _, o := range all {
				if o.ID == e.ID {
					continue
				}
				for _, op := range o.Ports {
					if op.NodePort == pm.NodePort && op.Proto == pm.Proto {
						return model.Conflictf("node port %d/%s is published by endpoint %s", pm.NodePort, pm.Proto, o.ID)
					}
				}
			}
			if idx >= 0 {
				e.Ports[idx] = pm
			} else {
				e.Ports = append(e.Ports, pm)
			}
		}
		if err := d.syncPorts(old, portEntries(e)); err != nil {
			d.syncPorts(portEntries(e), old)
			return err
		}
		return tx.PutEndpoint(e)
	})
	if err != nil {
		return nil, err
	}
	d.log.Info("ports published", "endpoint", id, "ports", e.Ports)
	return e, nil
}

// syncPorts moves the datapath from the old entries to the new ones.
func (d *Daemon) syncPorts(old, new []datapath.Port) error {
	for _, p := range old {
		if !slices.Contains(new, p) {
			if err := d.dp.DeletePort(p); err != nil {
				return err
			}
		}
	}
	for _, p := range new {
		if err := d.dp.PutPort(p); err != nil {
			return fmt.Errorf("publish %d/%d: %w", p.NodePort, p.Proto, err)
		}
	}
	return nil
}

// Flows lists conntrack entries.
func (d *Daemon) Flows(limit int) ([]api.Flow, error) {
	if d.dp == nil {
		return nil, fmt.Errorf("conntrack: %v: %w", d.dpErr, model.ErrUnavailable)
	}
	fs, err := d.dp.Flows(limit)
	out := make([]api.Flow, 0, len(fs))
	for _, f := range fs {
		af := api.Flow{Proto: protoName(f.Proto), Src: f.Src.String(), Dst: f.Dst.String(), Direction: "original",
			State: f.State, NAT: f.NAT, Packets: f.Packets, Bytes: f.Bytes, ExpiresIn: f.ExpiresInSeconds}
		if f.Reply {
			af.Direction = "reply"
		}
		if f.NAT != "" {
			af.NATTo = f.NATTo.String()
		}
		if f.NATSrc.IsValid() {
			af.NATTo += " from " + f.NATSrc.String()
		}
		out = append(out, af)
	}
	return out, err
}

// FlushFlows deletes every conntrack entry.
func (d *Daemon) FlushFlows() (int, error) {
	if d.dp == nil {
		return 0, fmt.Errorf("conntrack: %v: %w", d.dpErr, model.ErrUnavailable)
	}
	return d.dp.FlushCT()
}

// CTStats summarises the conntrack table.
func (d *Daemon) CTStats() (*api.CTStats, error) {
	if d.dp == nil {
		return nil, fmt.Errorf("conntrack: %v: %w", d.dpErr, model.ErrUnavailable)
	}
	s, err := d.dp.CTStats()
	if err != nil {
		return nil, err
	}
	out := &api.CTStats{Entries: s.Entries, MaxEntries: s.MaxEntries, Expired: s.Expired, BytesPerEntry: s.BytesPerEntry,
		GCRuns: d.ct.gcRuns.Load(), GCDeleted: d.ct.gcDeleted.Load()}
	if cs, err := d.dp.Counters(0); err == nil {
		for k, c := range cs {
			if k.Reason.String() == "pass_ct_full" {
				out.TableFull += c.Packets
			}
		}
	}
	return out, nil
}
