// Package k8s is xlaned's Kubernetes mode: it watches the API server's
// Nodes, Services, EndpointSlices, NetworkPolicies, Pods and Namespaces
// (client-go informers, in-cluster or from a kubeconfig) and programs the
// daemon to match: a kube-proxy replacement and a NetworkPolicy
// implementation.
//
// The contract:
//   - Nodes → the cluster's nodes (Target.SyncNodes, the whole set, as
//     model.Node records: NodeRecord): a Node's first InternalIP of each
//     family is its underlay address, its spec.podCIDRs (spec.podCIDR
//     before dual-stack) its pod CIDRs. A Node without either is left out
//     until it has them.
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
//     sessionAffinity ClientIP keeps a client on its backend for
//     sessionAffinityConfig.clientIP.timeoutSeconds (10800 by default)
//     after its last new connection (the datapath's xlane_affinity). Headless
//     and ExternalName Services have no VIP.
//   - NetworkPolicies, with the Pods and Namespaces they select →
//     firewall rules named with PolicyPrefix (Target.ApplyFirewallOwned:
//     those rules replaced atomically, every other rule kept): per policy
//     and rule an allowance of the peers' addresses and ports to (ingress)
//     or from (egress) the selected pods of this node, then per isolated
//     direction a drop, after every policy's allowances (policies OR-ed).
//   - Translation is pure (Translate, TranslatePolicies, NodeRecord) and
//     table-tested. The controller (Run) records what each event touches:
//     after a burst it applies the Services that changed alone (a full
//     translation and pruning apply at the first sync, after a failure,
//     when this node's addresses change or a VIP is contested), the nodes
//     when a Node changed, the policies' rules when a policy, Pod or
//     Namespace changed.
package k8s
