package daemon

import (
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// rememberSysctls records what the node's sysctls were before xlane first
// changes them (net.ipv6.conf.*.forwarding, for a network with an IPv6
// subnet), so that `xlaned --uninstall` can put them back; a plain stop
// leaves them, as it leaves the networks. It returns the values it took
// now (nil when already recorded), which undo a create that fails.
func rememberSysctls(tx *store.Tx, n *model.Network) (map[string]string, error) {
	if _, _, ok := n.Subnet6(); !ok {
		return nil, nil
	}
	saved, err := tx.SavedSysctls()
	if err != nil {
		return nil, err
	}
	// (The uplink's IPv4 forwarding may be recorded already:
	// forwarding4.)
	if _, ok := saved[netconf.Forwarding6All]; ok {
		return nil, nil
	}
	before, err := netconf.Forwarding6Before()
	if err != nil {
		return nil, err
	}
	return before, tx.SaveSysctls(before)
}

// restoreSysctls writes back what rememberSysctls recorded.
func (d *Daemon) restoreSysctls() error {
	var saved map[string]string
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		saved, err = tx.SavedSysctls()
		return err
	})
	if err != nil {
		return err
	}
	return netconf.RestoreSysctls(saved)
}

// forwarding4 lets Linux forward IPv4 packets that arrive on the uplink
// (net.ipv4.conf.<uplink>.forwarding; IPv6 forwarding is the node's, on
// with its first IPv6 network). The uplink's programs hand Linux packets
// for endpoints it must forward: a new flow's first packets to an endpoint
// with a firewall rule set (pass_fw: its to-endpoint rules run on the
// endpoint's tcx egress), translated (a published port, a NodePort's local
// backend) or not, and whatever they pass (pass_ttl, pass_too_big, ...).
// Without it Linux drops them (IpInAddrErrors): with any rule set
// installed, an outside client's IPv4 connections to a node's local
// endpoints failed. The value before xlane's first change is recorded for
// `xlaned --uninstall`.
func (d *Daemon) forwarding4(dev string) error {
	if err := d.rememberForwarding4(dev); err != nil {
		return err
	}
	return netconf.EnableForwarding(dev)
}

// rememberForwarding4 records net.ipv4.conf.<dev>.forwarding as it is, if
// not recorded yet, without changing it: for a change made later inside a
// store transaction (native routing's underlay, setOverlayMTU), where no
// other transaction can record it.
func (d *Daemon) rememberForwarding4(dev string) error {
	key := netconf.Forwarding4(dev)
	before, err := netconf.ReadSysctl(key)
	if err != nil {
		return err
	}
	return d.store.Update(func(tx *store.Tx) error {
		return tx.SaveSysctls(map[string]string{key: before})
	})
}
