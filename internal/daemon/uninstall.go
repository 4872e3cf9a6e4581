package daemon

import (
	"errors"
	"fmt"
	"os"

	"github.com/xlane-dev/xlane/internal/accelproxy"
	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/netconf"
)

// Uninstall removes everything this instance put on the node: endpoints and
// networks (veths, routes, gateway addresses), services, published ports,
// the uplink and socket programs, every pin, and the state file, and puts
// back the sysctls xlane changed (sysctl.go). The daemon is closed
// afterwards.
func (d *Daemon) Uninstall() error {
	var errs []error
	nets, err := d.Networks()
	errs = append(errs, err)
	for _, n := range nets {
		errs = append(errs, d.DeleteNetwork(n.Name, true))
	}
	svcs, err := d.f.Services.List()
	errs = append(errs, err)
	for _, s := range svcs {
		errs = append(errs, d.f.Services.Delete(s.Name))
	}
	// The cluster: every node's routes, the VXLAN device (with --node-name
	// or without: a daemon stopped and uninstalled alone).
	nodes, err := d.f.Cluster.Nodes()
	errs = append(errs, err)
	for i := range nodes {
		for _, p := range nodes[i].PodCIDRs {
			errs = append(errs, netconf.DeletePeerRoute(p))
		}
	}
	if routes, err := netconf.PeerRoutes(); err == nil {
		for _, p := range routes {
			errs = append(errs, netconf.DeletePeerRoute(p))
		}
	}
	errs = append(errs, d.dp.DetachOverlay(datapath.OverlayDevice), netconf.DeleteOverlay(datapath.OverlayDevice), cluster.UninstallEncryption())
	// Guard tables, VLAN ports, gateway addresses and unreachable routes
	// of networks a crash left without a record; devices, links and map
	// entries of endpoints a crash left, or whose removal above failed.
	errs = append(errs, netconf.PruneGuards(nil), netconf.PruneNetworks(nil), d.removeStale(nil, nil, nil))
	if ports, err := netconf.VLANPorts(); err == nil {
		for _, name := range ports {
			errs = append(errs, netconf.DeleteLink(name))
		}
	} else {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	// Only now: forwarding stayed on while endpoints were still there.
	if err := d.restoreSysctls(); err != nil {
		return fmt.Errorf("uninstall: restore sysctls: %w", err)
	}
	d.Close()
	if err := datapath.RemovePins(d.cfg.PinDir); err != nil {
		return err
	}
	// With the pins gone, the links to it are too.
	accelproxy.RemoveOwnCgroup(d.log)
	if err := os.Remove(d.cfg.StatePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove state %s: %w", d.cfg.StatePath, err)
	}
	d.log.Info("uninstalled", "state", d.cfg.StatePath, "pin_dir", d.cfg.PinDir)
	return nil
}
