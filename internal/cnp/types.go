package cnp

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The ClusterNetworkPolicy API (sigs.k8s.io/network-policy-api v0.3.0,
// policy.networking.k8s.io/v1beta1, the same schema as v1alpha2), the
// fields this package reads, with the upstream JSON names. Mirrored
// rather than imported: the module requires k8s.io/* v0.36, which would
// move the whole daemon's client-go (v0.34, the cluster's release) two
// minors for a dozen structs. Kubernetes mode's objects come from the
// dynamic client and decode into these (internal/k8s decodeCNP);
// standalone mode's from `xlane policy apply -f` (the same documents),
// through the API unchanged.

// APIVersion and Kind are the documents' apiVersion and kind.
const (
	APIVersion = "policy.networking.k8s.io/v1beta1"
	Kind       = "ClusterNetworkPolicy"
)

// ClusterNetworkPolicy is a cluster-scoped policy of the Admin or the
// Baseline tier.
type ClusterNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              Spec `json:"spec"`
}

// Spec is ClusterNetworkPolicySpec.
type Spec struct {
	Tier     string  `json:"tier"`     // Admin or Baseline
	Priority int32   `json:"priority"` // 0 (first) to 1000
	Subject  Subject `json:"subject"`
	Ingress  []Rule  `json:"ingress,omitempty"`
	Egress   []Rule  `json:"egress,omitempty"`
}

// The tiers and actions.
const (
	TierAdmin    = "Admin"
	TierBaseline = "Baseline"
	Accept       = "Accept"
	Deny         = "Deny"
	Pass         = "Pass"
)

// Subject selects the pods a policy applies to: exactly one field.
type Subject struct {
	Namespaces *metav1.LabelSelector `json:"namespaces,omitempty"`
	Pods       *NamespacedPod        `json:"pods,omitempty"`
}

// NamespacedPod selects pods by namespace and pod labels.
type NamespacedPod struct {
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	PodSelector       metav1.LabelSelector `json:"podSelector"`
}

// Rule is an ingress rule (From) or an egress rule (To).
type Rule struct {
	Name      string     `json:"name,omitempty"`
	Action    string     `json:"action"`
	From      []Peer     `json:"from,omitempty"`
	To        []Peer     `json:"to,omitempty"`
	Protocols []Protocol `json:"protocols,omitempty"`
}

// Peer is one peer: exactly one field (Nodes, Networks and DomainNames
// for egress only).
type Peer struct {
	Namespaces  *metav1.LabelSelector `json:"namespaces,omitempty"`
	Pods        *NamespacedPod        `json:"pods,omitempty"`
	Nodes       *metav1.LabelSelector `json:"nodes,omitempty"`
	Networks    []string              `json:"networks,omitempty"`
	DomainNames []string              `json:"domainNames,omitempty"`
}

// Protocol is one protocol match: exactly one field.
type Protocol struct {
	TCP                  *Ports `json:"tcp,omitempty"`
	UDP                  *Ports `json:"udp,omitempty"`
	SCTP                 *Ports `json:"sctp,omitempty"`
	DestinationNamedPort string `json:"destinationNamedPort,omitempty"`
}

// Ports is a protocol's destination port: a number or a range; nil
// is every port.
type Ports struct {
	DestinationPort *Port `json:"destinationPort,omitempty"`
}

// Port is a port number or an inclusive range.
type Port struct {
	Number int32 `json:"number,omitempty"`
	Range  *struct {
		Start int32 `json:"start"`
		End   int32 `json:"end"`
	} `json:"range,omitempty"`
}
