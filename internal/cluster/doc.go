// Package cluster is the cluster feature of xlaned: this node among other
// nodes (--node-name, --cluster-cidr, --routing). It owns the nodes' API
// (AddNode, RemoveNode, Nodes, Node, Info) and their validation (names,
// underlay addresses, pod CIDRs, the MTU a peer's underlay carries: mtu.go),
// the store's node records, and the datapath's nodes/overlay role: the
// peers' prefixes in xlane_peers, the VXLAN device and its programs, the
// routes to peers' pods, the node configuration's cluster addresses
// (cluster.go). It keeps the nodes equal to a --nodes file (nodesfile.go)
// or to the Kubernetes API's Node objects (SyncNodes: nodesync.go), probes
// the peers' liveness (peerprobe.go) and answers the core's network
// questions: a network's default subnets and MTU inside the cluster
// (ValidateNetwork: NetworkSubnets, NetworkMTU), its VNI (NetworkVNI).
//
// It also holds the neighbour mirror (neigh.go, Neighbours): the node's
// ARP/ND table copied into xlane_neigh for the XDP datapath, which runs on
// a node alone as well.
//
// A daemon that runs alone has a Cluster too, not joined (Joined false):
// it refuses node changes and lists what the store holds. The package
// reaches the rest of the daemon only through core.Core (the lock, the
// store, the datapath, fault points, the node configuration, the object
// errors of the health report, the sysctls `xlaned --uninstall` restores);
// the core calls it at start (Start), at a network's validation
// (ValidateNetwork, a core.NetworkValidator: NetworkSubnets at
// core.CheckDefaults, NetworkMTU at core.CheckShape) and at its apply and
// removal (NetworkVNI).
package cluster
