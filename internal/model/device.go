package model

// DeviceType is the kind of device pair that connects a network's
// endpoints to the node.
type DeviceType string

const (
	// DeviceVeth is a veth pair: the datapath mode's programs sit on the
	// host side (tcx or XDP).
	DeviceVeth DeviceType = "veth"
	// DeviceNetkit is a netkit pair in L3 mode (no ARP, no MACs): xlane's
	// programs run inside the pair's transmit path (Linux 6.7+).
	DeviceNetkit DeviceType = "netkit"
	// DeviceNetkitL2 is a netkit pair in L2 mode (Ethernet with ARP, like
	// veth), for workloads that need L2 (DHCP, ARP-based tools).
	DeviceNetkitL2 DeviceType = "netkit-l2"
	// DeviceAuto picks netkit where the kernel has it and the mode can use
	// it, else veth; resolved when the network is created.
	DeviceAuto DeviceType = "auto"
)

// DeviceTypes lists the device types a network can ask for, default first.
var DeviceTypes = []DeviceType{DeviceVeth, DeviceAuto, DeviceNetkit, DeviceNetkitL2}

// DefaultDevice is the device type of a network created without --device:
// veth, which every mode and kernel supports and a network can switch modes
// on; netkit is asked for (or auto) explicitly.
const DefaultDevice = DeviceVeth

// ParseDeviceType validates a device type; "" is the default.
func ParseDeviceType(s string) (DeviceType, error) {
	if s == "" {
		return DefaultDevice, nil
	}
	for _, d := range DeviceTypes {
		if string(d) == s {
			return d, nil
		}
	}
	return "", Fieldf("device", "%q: unknown device type (want one of %v)", s, DeviceTypes)
}

// Netkit reports whether the device type is a netkit pair.
func (d DeviceType) Netkit() bool { return d == DeviceNetkit || d == DeviceNetkitL2 }

// Devices returns the network's endpoint device type; records written
// before device types existed are veth.
func (n *Network) Devices() DeviceType {
	if n.DeviceType == "" {
		return DeviceVeth
	}
	return n.DeviceType
}
