package datapath

import (
	"net"
	"reflect"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestEndpointEncoding: each boolean of an endpoint entry is its XL_EP_*
// flag and nothing else, the other fields land in their struct
// endpoint_val fields, and decoding gives the entry back.
func TestEndpointEncoding(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	host, _ := net.ParseMAC("02:00:00:00:00:02")
	base := model.EndpointEntry{Ifindex: 7, NetworkID: 3, MAC: mac, HostMAC: host, MTU: 1450}
	v := endpointVal(base)
	if v.Flags != 0 || v.Ifindex != 7 || v.NetworkId != 3 || v.Mtu != 1450 || net.HardwareAddr(v.Mac[:]).String() != mac.String() || net.HardwareAddr(v.HostMac[:]).String() != host.String() {
		t.Errorf("plain entry: %+v", v)
	}
	for name, c := range map[string]struct {
		set  func(*model.EndpointEntry)
		flag uint16
	}{
		"xdp target":        {func(e *model.EndpointEntry) { e.XDPTarget = true }, bpf.EPFlagXDPTarget},
		"masquerade":        {func(e *model.EndpointEntry) { e.Masquerade = true }, bpf.EPFlagMasquerade},
		"icc off":           {func(e *model.EndpointEntry) { e.ICCOff = true }, bpf.EPFlagNoICC},
		"isolated":          {func(e *model.EndpointEntry) { e.Isolated = true }, bpf.EPFlagIsolated},
		"allow unsolicited": {func(e *model.EndpointEntry) { e.AllowUnsolicited = true }, bpf.EPFlagAllowUnsolicited},
		"vlan":              {func(e *model.EndpointEntry) { e.VLAN = true }, bpf.EPFlagVLAN},
		"no peer":           {func(e *model.EndpointEntry) { e.NoPeer = true }, bpf.EPFlagNoPeer},
	} {
		e := base
		c.set(&e)
		v := endpointVal(e)
		if v.Flags != c.flag {
			t.Errorf("%s: flags %#x, want %#x", name, v.Flags, c.flag)
		}
		if back := endpointEntry(&v); !reflect.DeepEqual(back, e) {
			t.Errorf("%s: decoded %+v, want %+v", name, back, e)
		}
	}
	// The entry of a network's endpoint carries the network's policies.
	n := &model.Network{ID: 9, MTU: 1500, Masquerade: true, ICCOff: true, Isolated: true, AllowUnsolicited: true, VLAN: 12}
	e := model.NewEndpointEntry(n, &model.Endpoint{VM: true}, 4, mac, host, true)
	want := bpf.EPFlagXDPTarget | bpf.EPFlagMasquerade | bpf.EPFlagNoICC | bpf.EPFlagIsolated | bpf.EPFlagAllowUnsolicited | bpf.EPFlagVLAN | bpf.EPFlagNoPeer
	if v := endpointVal(e); v.Flags != want || v.NetworkId != 9 || v.Mtu != 1500 || v.Ifindex != 4 {
		t.Errorf("entry of a network with every policy: %+v, want flags %#x", v, want)
	}
}
