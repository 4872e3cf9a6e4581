package daemon

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// VLAN networks (docs/multinode.md): the network's subnets are an 802.1Q
// VLAN of the uplink; its port (netconf.EnsureVLAN) is the node's L3
// device there and the uplink's tc programs push and pop the tag
// (bpf/lib/vlan.h).

// validateVLAN checks req's VLAN for network n (its mode and MTU already
// resolved, the MTU 0 when not asked for) and sets n.VLAN and, by
// default, n.MTU: the uplink's, the VLAN's frames being the uplink's.
func (d *Daemon) validateVLAN(tx *store.Tx, n *model.Network, req api.NetworkCreate) error {
	if req.VLAN == 0 {
		return nil
	}
	if req.VLAN > 4094 {
		return model.Fieldf("vlan", "%d: must be between 1 and 4094", req.VLAN)
	}
	if d.cfg.Uplink == "" {
		return model.Fieldf("vlan", "%d: a VLAN is the uplink's, and xlaned runs without --uplink", req.VLAN)
	}
	if !n.Mode.BPF() {
		return model.Fieldf("vlan", "mode %s has no datapath to tag and untag the VLAN: use a BPF mode (tc, xdp, xdp-generic)", n.Mode)
	}
	if err := d.dp.Available(); err != nil {
		return model.Fieldf("vlan", "the BPF datapath is unavailable: %v", err)
	}
	up, err := netlink.LinkByName(d.cfg.Uplink)
	if err != nil {
		return fmt.Errorf("uplink %q: %w", d.cfg.Uplink, err)
	}
	others, err := tx.Networks()
	if err != nil {
		return err
	}
	for _, o := range others {
		if o.VLAN == req.VLAN {
			return model.Fieldf("vlan", "%d is network %q's", req.VLAN, o.Name)
		}
	}
	n.VLAN = req.VLAN
	if n.MTU == 0 {
		n.MTU = up.Attrs().MTU
	}
	if n.MTU > up.Attrs().MTU {
		return model.Fieldf("mtu", "%d: larger than the uplink's %d, which carries the VLAN", n.MTU, up.Attrs().MTU)
	}
	return nil
}

// applyVLAN makes network n's VLAN port and tells the datapath. Idempotent.
func (d *Daemon) applyVLAN(n *model.Network) error {
	if n.VLAN == 0 {
		return nil
	}
	if d.cfg.Uplink == "" {
		return fmt.Errorf("network %q is on VLAN %d of the uplink, and xlaned runs without --uplink", n.Name, n.VLAN)
	}
	up, err := netlink.LinkByName(d.cfg.Uplink)
	if err != nil {
		return fmt.Errorf("uplink %q: %w", d.cfg.Uplink, err)
	}
	dev, port, err := netconf.EnsureVLAN(n, up.Attrs().MTU)
	if err != nil {
		return err
	}
	return d.dp.PutVLAN(datapath.VLAN{ID: n.VLAN, NetworkID: n.ID, Uplink: up.Attrs().Index,
		Dev: dev.Attrs().Index, Port: port.Attrs().Index}, port.Attrs().Name)
}

// removeVLAN undoes applyVLAN; missing parts are fine.
func (d *Daemon) removeVLAN(n *model.Network) error {
	if n.VLAN == 0 {
		return nil
	}
	_, port := netconf.VLANNames(n.VLAN)
	return errors.Join(d.dp.DeleteVLAN(n.VLAN, port), netconf.DeleteVLAN(n))
}

// setupVLANs applies every VLAN network's port and its endpoints' proxy
// entries, and removes the ports and datapath entries no network has.
// Run at start, after Reconcile (which detaches every link no endpoint
// accounts for).
func (d *Daemon) setupVLANs() error {
	nets, eps, err := d.storedNetworksAndEndpoints()
	if err != nil {
		return err
	}
	var errs []error
	want := map[uint16]bool{}
	byName := map[string]*model.Network{}
	for i := range nets {
		n := &nets[i]
		byName[n.Name] = n
		if n.VLAN == 0 {
			continue
		}
		want[n.VLAN] = true
		errs = append(errs, d.applyVLAN(n))
	}
	for _, e := range eps {
		if n := byName[e.Network]; n != nil && n.VLAN != 0 {
			errs = append(errs, netconf.SetVLANProxy(n.VLAN, e.IPs, true))
		}
	}
	have, err := d.dp.VLANs()
	errs = append(errs, err)
	for _, v := range have {
		if !want[v.ID] {
			_, port := netconf.VLANNames(v.ID)
			errs = append(errs, d.dp.DeleteVLAN(v.ID, port))
		}
	}
	ports, err := netconf.VLANPorts()
	errs = append(errs, err)
	for _, name := range ports {
		var vid uint16
		if _, err := fmt.Sscanf(name, netconf.VLANDevPrefix+"%d", &vid); err != nil || !want[vid] {
			d.log.Info("removing stale vlan port", "device", name)
			errs = append(errs, netconf.DeleteVLAN(&model.Network{VLAN: vid}))
		}
	}
	return errors.Join(errs...)
}
