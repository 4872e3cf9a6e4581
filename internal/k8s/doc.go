// Package k8s is xlaned's Kubernetes mode: it watches the API server's
// Nodes, Services and EndpointSlices (client-go informers, in-cluster or
// from a kubeconfig) and programs the daemon to match, a kube-proxy
// replacement.
//
// The contract:
//   - Nodes → the cluster's nodes (Target.SyncNodes, the whole set): a
//     Node's first InternalIP of each family is its underlay address, its
//     spec.podCIDRs (spec.podCIDR before dual-stack) its pod CIDRs. A Node
//     without either is left out until it has them.
//   - Services + EndpointSlices → xlane services (Target.ApplyServices, the
//     whole set in one batch, pruning only the names this package owns,
//     those starting with NamePrefix). One xlane service per VIP of every
//     TCP and UDP port: each ClusterIP, each externalIP, each LoadBalancer
//     ingress IP, and this node's InternalIPs at the NodePort. Backends come
//     from the EndpointSlices labelled with the Service's name, through the
//     slice port of the same name and protocol. Ready endpoints take new
//     flows; serving terminating ones are drained (weight 0: their
//     established flows run on) unless none is ready, then they take new
//     flows (as kube-proxy does). internalTrafficPolicy Local limits a
//     ClusterIP to this node's endpoints, externalTrafficPolicy Local the
//     external VIPs (NodePort, LoadBalancer, externalIPs).
//     sessionAffinity ClientIP hashes the client address only. Headless
//     and ExternalName Services have no VIP.
//   - Translation is pure (Translate, NodeRecord) and table-tested; the
//     controller (Run) recomputes the whole set from the informers' caches
//     after every burst of events, so a sync is one apply whatever changed.
package k8s
