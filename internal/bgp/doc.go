// Package bgp is xlaned's BGP speaker: an embedded GoBGP v4 server
// (github.com/osrg/gobgp/v4, a library here, no separate daemon) that
// tells the network's routers where this node's pods and LoadBalancer
// addresses are (docs/bgp.md).
//
// The speaker derives everything from the store: its peers (bucket
// bgp_peers, `xlane bgp peer add`), and what it announces (Desired): the
// node's pod CIDRs, each service VIP inside an LB pool (bucket lb_pools,
// internal/lbipam) while the service has a backend taking new flows, and
// the service CIDRs xlaned was given. It resyncs after every committed
// store transaction (store.OnCommit), so a service deleted, or losing its
// last (local, with externalTrafficPolicy Local) endpoint, is withdrawn
// by the same commit that changed the datapath, and the core calls
// nothing of this package beyond New and Close.
//
// Graceful restart (RFC 4724): the sessions announce a restart time and
// the forwarding-state bit (the datapath outlives xlaned); a stop with
// --bgp-stop graceful, or kill -9, closes them without a NOTIFICATION, so
// the peers keep the routes while xlaned restarts; the restarted speaker
// installs its routes before it opens its sessions, so its first update
// refreshes the stale routes instead of replacing them with nothing.
package bgp
