package model

import "net"

// EndpointEntry is what the datapath keeps of one endpoint address: the
// host device that reaches it and what its network applies to its
// traffic. The datapath encodes it into its endpoint map
// (internal/datapath/endpoints.go; struct endpoint_val, XL_EP_* flags).
type EndpointEntry struct {
	Ifindex   int    // the host-side device
	NetworkID uint32 // Network.ID
	MAC       net.HardwareAddr
	HostMAC   net.HardwareAddr // the host-side device's (the gateway MAC)
	MTU       int
	// XDPTarget: native XDP may redirect into the host device (its peer
	// has NAPI).
	XDPTarget bool
	// The network's policies (Network): Masquerade, ICCOff, Isolated,
	// AllowUnsolicited; VLAN: the network is on a VLAN of the uplink.
	Masquerade       bool
	ICCOff           bool
	Isolated         bool
	AllowUnsolicited bool
	VLAN             bool
	// NoPeer: the host device has no peer to redirect into (a VM's tap or
	// port).
	NoPeer bool
}

// NewEndpointEntry is the entry of an endpoint of network n whose host
// device is ifindex (MAC hostMAC), the endpoint's MAC mac.
func NewEndpointEntry(n *Network, e *Endpoint, ifindex int, mac, hostMAC net.HardwareAddr, xdpTarget bool) EndpointEntry {
	return EndpointEntry{Ifindex: ifindex, NetworkID: n.ID, MAC: mac, HostMAC: hostMAC, MTU: n.MTU, XDPTarget: xdpTarget,
		Masquerade: n.Masquerade, ICCOff: n.ICCOff, Isolated: n.Isolated, AllowUnsolicited: n.AllowUnsolicited,
		VLAN: n.VLAN != 0, NoPeer: e.VM}
}
