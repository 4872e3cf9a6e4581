package daemon

import (
	"github.com/xlane-dev/xlane/internal/model"
)

// natSupported refuses NAT (masquerade, published ports) where the
// datapath cannot do it: in kernel mode there is no BPF to do it, and under
// generic XDP the tc program that does NAT sees the packets XDP passes on
// without their MAC header at skb->data on Linux 6.18 (measured: every IP
// packet counted as pass_non_ip), so NAT flows would leave untranslated.
func natSupported(mode model.Mode, nat bool) error {
	if !nat {
		return nil
	}
	switch mode {
	case model.ModeKernel:
		return model.Fieldf("masquerade", "kernel mode has no NAT (plain routing): use a BPF mode or --masquerade=false")
	case model.ModeXDPGeneric:
		return model.Fieldf("masquerade", "xdp-generic cannot do NAT on this kernel (tc after generic XDP sees no MAC header): use tc or xdp, or --masquerade=false")
	}
	return nil
}
