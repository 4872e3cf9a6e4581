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
	if len(saved) > 0 {
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
