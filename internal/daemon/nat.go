package daemon

import (
	"github.com/xlane-dev/xlane/internal/model"
)

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
