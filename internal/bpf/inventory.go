package bpf

import (
	"maps"

	"github.com/cilium/ebpf"
)

// Maps lists every map loaded so far by its ELF name (the tc collection's
// and those the later collections added), for inventories: metrics, map
// pressure, dumps. The maps stay the Objects'.
func (o *Objects) Maps() map[string]*ebpf.Map { return maps.Clone(o.maps) }

// Programs lists the loaded programs by their ELF (section function)
// names; the netkit programs, loaded on first use, are the NetkitObjects'.
// Programs whose collection did not load on this kernel (XDPErr) are left
// out.
func (o *Objects) Programs() map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	for name, p := range map[string]*ebpf.Program{
		"xlane_from_endpoint":             o.XlaneFromEndpoint,
		"xlane_to_endpoint":               o.XlaneToEndpoint,
		"xlane_xdp_from_endpoint":         o.xdp.FromEndpoint,
		"xlane_xdp_generic_from_endpoint": o.xdp.GenericFromEndpoint,
		"xlane_xdp_from_uplink":           o.fromUplink,
		"xlane_xdp_generic_from_uplink":   o.genUplink,
		"xlane_from_uplink":               o.tcFromUplink,
		"xlane_connect4":                  o.sock.XlaneConnect4,
		"xlane_connect6":                  o.sock.XlaneConnect6,
	} {
		if p != nil {
			out[name] = p
		}
	}
	return out
}

// Programs lists the netkit programs by their ELF names.
func (n *NetkitObjects) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{"xlane_nk_from_endpoint": n.FromEndpoint, "xlane_nk_to_endpoint": n.ToEndpoint}
}
