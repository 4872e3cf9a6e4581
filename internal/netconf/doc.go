// Package netconf does xlane's netlink and sysctl work: each network's
// gateway addresses on the node's lo, the veth (or netkit) pair of each
// endpoint, the container side
// (addresses, routes, MTU) and the host side (routes, permanent neighbours,
// forwarding). It is the `kernel` datapath on its own and the slow path of
// every BPF mode.
//
// The addressing model is routed, not bridged: a container's address has no
// prefix route; it reaches its subnet and the world through the gateway
// (IPv4: the network's gateway address, answered by the host veth since the
// address is local to the node; IPv6: fe80::1 on the host veth). The node
// reaches each endpoint through a /32 or /128 route on its host veth.
//
// Every function here is idempotent, so the daemon's reconcile can run them
// again on a half-built or damaged endpoint.
package netconf
