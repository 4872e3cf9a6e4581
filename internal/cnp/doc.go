// Package cnp is ClusterNetworkPolicy (sigs.k8s.io/network-policy-api
// v0.3.0, policy.networking.k8s.io/v1beta1): its types and the one compiler
// of its Admin and Baseline tiers into firewall rules (Compile), used by
// Kubernetes mode (internal/k8s: pods, namespaces, nodes) and by
// standalone mode (internal/policy: a node's endpoints, a network as the
// namespace) alike. Compile validates every field and names the one it
// refuses (spec.egress[0].to[1].networks[0]: ...); the rules it makes are
// the firewall's own (priorities, allow/drop/pass, dst_names), so the cost
// per packet is the firewall's, flat in the number of rules
// (docs/kubernetes.md, docs/policy.md).
package cnp
