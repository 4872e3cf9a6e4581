// Package wireguard encrypts the traffic between the nodes of a cluster
// (xlaned --encryption wireguard, docs/encryption.md).
//
// Each node owns one WireGuard device, xlwg0, whose addresses are the
// node's cluster addresses (the first address of each of its pod CIDRs,
// which no endpoint ever gets and which every peer already routes to it).
// A peer is a WireGuard peer whose allowed IPs are its cluster addresses,
// reached at its underlay address; a route per peer cluster address
// (protocol 121) points into the device. The overlay then tunnels to a
// peer's cluster address instead of its underlay address: the VXLAN
// packets (the pods' traffic, service traffic to remote backends, the
// replies) enter xlwg0, leave encrypted as WireGuard UDP between the
// underlay addresses, and come out of the peer's xlwg0 into its VXLAN
// device and its tc programs unchanged.
//
// Two engines carry the device, chosen at start: the kernel's WireGuard
// (a "wireguard" link configured over generic netlink by wgctrl) where the
// kernel has it, and wireguard-go embedded in xlaned on a TUN device
// (batched reads and writes, TUN GSO/GRO offloads) where it has not. Both
// are configured with wgctrl's types (wgtypes.Config): the embedded one
// through its UAPI text protocol, spoken in-process (uapi.go), so there is
// one configuration path.
//
// Each peer's session is read every second (Check, session.go): one
// without a working session (after a first handshake's grace) is dropped
// by the datapath with --encryption-strict (drop_unencrypted) or falls
// back to the cleartext overlay, and nudged until a handshake succeeds.
// SetPrivateKey rotates this node's key pair.
//
// The private key is the caller's (the daemon keeps it in its 0600 state
// file); this package hands it to the device only, and nothing it returns
// (Status) carries it.
package wireguard
