// Package policy is standalone mode's ClusterNetworkPolicies: the Admin
// and Baseline tiers for Docker, VM and CLI endpoints, without Kubernetes
// (`xlane policy apply -f`, PUT /v1/policies; docs/policy.md).
//
// The model: an endpoint's labels (given when it is added: `xlane
// endpoint add --label`, the API's EndpointAdd.Labels; validated here as
// Kubernetes label keys and values) are a pod's labels, and its network
// is its namespace, whose one label is kubernetes.io/metadata.name: the
// network's name. The documents are Kubernetes' own
// (policy.networking.k8s.io/v1beta1 ClusterNetworkPolicy), stored as they
// are, and compiled by the same compiler as Kubernetes mode's
// (internal/cnp) into firewall rules named policy.TIER:NAME.…, which this
// package owns in the firewall (ApplyOwned). Nodes peers select nothing
// (a standalone node knows no Nodes) and named ports nothing (endpoints
// have no named ports).
//
// An apply is all or nothing: every document is validated and compiled
// first (an error names the document and the field), then the rules are
// installed in one atomic firewall apply, then stored. When endpoints
// come, go or change, the policies are compiled again (checked every
// second) and the firewall's rules replaced if they changed.
package policy
