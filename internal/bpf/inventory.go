package bpf

import (
	"maps"
	"reflect"

	"github.com/cilium/ebpf"
)

// Maps lists every map loaded so far by its ELF name (the tc collection's
// and those the later collections added), for inventories: metrics, map
// pressure, dumps. The maps stay the Objects'.
func (o *Objects) Maps() map[string]*ebpf.Map { return maps.Clone(o.maps) }

// Programs lists the loaded programs by their ELF (function) names; the
// netkit programs, loaded on first use, are the NetkitObjects'. Programs
// whose collection did not load on this kernel (XDPErr) are left out.
func (o *Objects) Programs() map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	progsOf(&o.tcPrograms, out)
	progsOf(&o.xdp, out)
	progsOf(&o.sock, out)
	for name, p := range map[string]*ebpf.Program{
		"xlane_xdp_from_uplink":         o.fromUplink,
		"xlane_xdp_generic_from_uplink": o.genUplink,
		"xlane_from_uplink":             o.tcFromUplink,
		"xlane_from_overlay":            o.fromOverlay,
		"xlane_to_overlay":              o.toOverlay,
		"xlane_to_vlan":                 o.toVLAN,
	} {
		if p != nil {
			out[name] = p
		}
	}
	return out
}

// Programs lists the netkit programs by their ELF names.
func (n *NetkitObjects) Programs() map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	progsOf(n, out)
	return out
}

// progsOf adds the non-nil programs of a struct with ebpf tags.
func progsOf(s any, out map[string]*ebpf.Program) {
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Tag.Get("ebpf")
		if p, ok := v.Field(i).Interface().(*ebpf.Program); ok && name != "" && p != nil {
			out[name] = p
		}
	}
}
