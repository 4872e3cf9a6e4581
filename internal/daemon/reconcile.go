package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/vm"
)

// Reconcile makes the kernel match the store: networks and endpoints are
// (re)built where parts are missing, pinned links are re-attached or their
// programs swapped for this binary's, and xlane objects the store does not
// know (links, pins, map entries, devices, marked routes and addresses)
// are removed.
//
// Reconcile never fails over one object's state: the daemon must start
// (and --uninstall run) whatever one network or endpoint looks like. What
// it cannot apply to a network or an endpoint is logged, kept per object
// (objerrs.go: `endpoint ls` shows it "degraded", the status' health
// lists it) and the rest goes on. Only an unreadable store is an error.
//
// An endpoint whose container namespace is gone keeps its record (the
// runtime will remove it) and is reported; it is not an error.
func (d *Daemon) Reconcile() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	nets, eps, err := d.storedNetworksAndEndpoints()
	if err != nil {
		return err
	}
	d.objErrs.reset()
	failed := func(kind, name string, err error) {
		d.objErrs.set(kind, name, err)
		if err == nil {
			return
		}
		d.log.Error("reconcile: "+kind+" not fully applied; the daemon runs on", kind, name, "err", err)
	}
	byName := map[string]*model.Network{}
	for i := range nets {
		n := &nets[i]
		byName[n.Name] = n
		var errs []error
		// A route the node got at the subnet since is left alone and the
		// daemon still starts, so the network can be removed.
		if err := netconf.EnsureNetwork(n); errors.Is(err, netconf.ErrRouteTaken) {
			d.log.Error("network's subnet is taken by a node route; remove the network", "network", n.Name, "err", err)
		} else if err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, netconf.EnsureInternal(n), netconf.EnsureGuard(n, d.f.Cluster.CIDRs()))
		failed(objNetwork, n.Name, errors.Join(errs...))
	}
	failed(objNode, "prune", errors.Join(netconf.PruneInternal(nets), netconf.PruneGuards(nets), netconf.PruneNetworks(nets)))
	for i := range eps {
		e := &eps[i]
		n := byName[e.Network]
		if n == nil {
			failed(objEndpoint, e.ID, model.NotFoundf("network %q of endpoint %s", e.Network, e.ID))
			continue
		}
		switch {
		case e.VM:
			// The tap is persistent: still there after a crash of
			// xlaned, recreated by applyEndpoint if someone deleted it.
		case !e.VethOnly():
			if _, err := netconf.ResolveNetns(e.Netns); err != nil {
				d.log.Warn("endpoint's netns is gone; keeping the record until it is removed", "endpoint", e.ID, "netns", e.Netns)
				continue
			}
		default:
			if _, err := netconf.HostLink(e); err != nil {
				d.log.Warn("veth-only endpoint's host veth is gone", "endpoint", e.ID, "host_ifname", e.HostIf)
				continue
			}
		}
		failed(objEndpoint, e.ID, d.applyEndpoint(e, n))
	}
	failed(objNode, "remove stale", d.removeUnaccountedFor(accountFor(nets, eps)))
	d.log.Info("reconciled", "networks", len(nets), "endpoints", len(eps))
	return nil
}

// accounted is what the records account for in the kernel.
type accounted struct {
	devs    map[string]bool // networks' devices, endpoints' host and peer devices
	tcDevs  map[string]bool // host devices of endpoints in BPF modes
	tcAddrs map[netip.Addr]bool
	ports   []datapath.Port
}

func accountFor(nets []model.Network, eps []model.Endpoint) accounted {
	a := accounted{devs: map[string]bool{}, tcDevs: map[string]bool{}, tcAddrs: map[netip.Addr]bool{}}
	byName := map[string]*model.Network{}
	for i := range nets {
		byName[nets[i].Name] = &nets[i]
		a.devs[nets[i].Device] = true
	}
	for i := range eps {
		e := &eps[i]
		n := byName[e.Network]
		if n == nil {
			continue
		}
		a.devs[e.HostIf], a.devs[e.PeerIf] = true, true
		if n.Mode.BPF() {
			a.ports = append(a.ports, portEntries(e)...)
			a.tcDevs[e.HostIf] = true
			for _, ip := range e.IPs {
				a.tcAddrs[ip] = true
			}
		}
	}
	return a
}

// removeUnaccounted removes what no record accounts for (removeStale, and
// published ports no endpoint has).
func (d *Daemon) removeUnaccounted() error {
	nets, eps, err := d.storedNetworksAndEndpoints()
	if err != nil {
		return err
	}
	return d.removeUnaccountedFor(accountFor(nets, eps))
}

func (d *Daemon) removeUnaccountedFor(a accounted) error {
	errs := []error{d.removeStale(a.devs, a.tcDevs, a.tcAddrs)}
	have, err := d.dp.PublishedPorts()
	errs = append(errs, err)
	for _, p := range have {
		if !slices.Contains(a.ports, p) {
			errs = append(errs, d.dp.DeletePort(p))
		}
	}
	return errors.Join(errs...)
}

// removeStale deletes xlane devices, links, map entries and counters that
// no record accounts for (left by a crash between kernel and store work).
func (d *Daemon) removeStale(keepDev, tcDevs map[string]bool, tcAddrs map[netip.Addr]bool) error {
	var errs []error
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		name := l.Attrs().Name
		stale := !keepDev[name] &&
			((strings.HasPrefix(name, "xlh") || strings.HasPrefix(name, "xlc")) &&
				(l.Type() == "veth" || l.Type() == "netkit") ||
				strings.HasPrefix(name, vm.TapPrefix) && l.Type() == "tuntap")
		if stale {
			d.log.Info("removing stale device", "device", name)
			// Deleting one end of a pair deletes the other too.
			if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("delete stale %s: %w", name, err))
			}
		}
	}
	devs, err := d.dp.AttachedDevices()
	errs = append(errs, err)
	for _, dev := range devs {
		if !tcDevs[dev] {
			d.log.Info("removing stale tcx links", "device", dev)
			errs = append(errs, d.dp.Detach(dev, 0))
		}
	}
	ports, err := d.dp.VMPorts()
	errs = append(errs, err)
	for _, p := range ports {
		if !keepDev[p] {
			d.log.Info("removing stale vm port pins", "device", p)
			errs = append(errs, d.dp.DetachVMPort(p))
		}
	}
	addrs, err := d.dp.EndpointAddrs()
	errs = append(errs, err)
	for _, a := range addrs {
		if !tcAddrs[a] {
			errs = append(errs, d.dp.DeleteEndpoint(a))
		}
	}
	errs = append(errs, d.pruneCounters())
	return errors.Join(errs...)
}

// storedNetworksAndEndpoints reads every network and endpoint record in one
// store transaction.
func (d *Daemon) storedNetworksAndEndpoints() (nets []model.Network, eps []model.Endpoint, err error) {
	err = d.store.View(func(tx *store.Tx) error {
		if nets, err = tx.Networks(); err != nil {
			return err
		}
		eps, err = tx.Endpoints()
		return err
	})
	return nets, eps, err
}
