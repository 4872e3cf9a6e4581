// Package vm is the VM endpoints feature of xlaned: an endpoint whose far
// side is a QEMU guest instead of a container. It owns the VM-only
// validation of an endpoint request (ValidateEndpoint, a
// core.EndpointValidator; Mode for a network's mode change), the tap's name
// (TapName), the AF_XDP port's program (AttachPort, PortInfo), the address
// servers on each tap (DHCPv4, DHCPv6 and router advertisements from the
// endpoint's IPAM lease: dhcp.go, dhcp6.go; Serve, Stop) and the probe of
// what the node's QEMU offers (Status: qemu.go).
//
// It reaches the rest of the daemon only through core.Core (the datapath,
// the counters); the core calls it at an endpoint's validate, apply, remove
// and inspect (internal/daemon: daemon.go).
package vm
