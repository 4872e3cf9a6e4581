package daemon

import "github.com/xlane-dev/xlane/internal/model"

// policySupported refuses a network policy the mode cannot enforce. ICC
// off and isolation are checks of the BPF datapath (ep_apart in
// bpf/lib/endpoint.h, on the endpoint map's XL_EP_NO_ICC and
// XL_EP_ISOLATED flags); kernel mode runs no BPF and would route between
// the endpoints regardless: loud rather than a network that silently does
// not keep them apart.
func policySupported(mode model.Mode, n *model.Network) error {
	if mode.BPF() {
		return nil
	}
	if n.ICCOff {
		return model.Fieldf("icc", "mode %s has no datapath to keep the network's endpoints apart (ICC off): use a BPF mode (tc, xdp, xdp-generic)", mode)
	}
	if n.Isolated {
		return model.Fieldf("isolated", "mode %s has no datapath to keep the network apart from others: use a BPF mode (tc, xdp, xdp-generic), or leave it unisolated", mode)
	}
	return nil
}
