package k8s

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The ClusterNetworkPolicy API (sigs.k8s.io/network-policy-api v0.3.0,
// policy.networking.k8s.io/v1beta1, the same schema as v1alpha2), the
// fields this package reads, with the upstream JSON names. Mirrored
// rather than imported: the module requires k8s.io/* v0.36, which would
// move the whole daemon's client-go (v0.34, the cluster's release) two
// minors for a dozen structs. Objects come from the dynamic client and
// decode into these (decodeCNP).

// CNPResource is the resource the controller watches.
var CNPResource = schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1beta1", Resource: "clusternetworkpolicies"}

// ClusterNetworkPolicy is a cluster-scoped policy of the Admin or the
// Baseline tier.
type ClusterNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CNPSpec `json:"spec"`
}

// CNPSpec is ClusterNetworkPolicySpec.
type CNPSpec struct {
	Tier     string     `json:"tier"`     // Admin or Baseline
	Priority int32      `json:"priority"` // 0 (first) to 1000
	Subject  CNPSubject `json:"subject"`
	Ingress  []CNPRule  `json:"ingress,omitempty"`
	Egress   []CNPRule  `json:"egress,omitempty"`
}

// The tiers and actions.
const (
	CNPTierAdmin    = "Admin"
	CNPTierBaseline = "Baseline"
	CNPAccept       = "Accept"
	CNPDeny         = "Deny"
	CNPPass         = "Pass"
)

// CNPSubject selects the pods a policy applies to: exactly one field.
type CNPSubject struct {
	Namespaces *metav1.LabelSelector `json:"namespaces,omitempty"`
	Pods       *CNPNamespacedPod     `json:"pods,omitempty"`
}

// CNPNamespacedPod selects pods by namespace and pod labels.
type CNPNamespacedPod struct {
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	PodSelector       metav1.LabelSelector `json:"podSelector"`
}

// CNPRule is an ingress rule (From) or an egress rule (To).
type CNPRule struct {
	Name      string        `json:"name,omitempty"`
	Action    string        `json:"action"`
	From      []CNPPeer     `json:"from,omitempty"`
	To        []CNPPeer     `json:"to,omitempty"`
	Protocols []CNPProtocol `json:"protocols,omitempty"`
}

// CNPPeer is one peer: exactly one field (Nodes, Networks and DomainNames
// for egress only).
type CNPPeer struct {
	Namespaces  *metav1.LabelSelector `json:"namespaces,omitempty"`
	Pods        *CNPNamespacedPod     `json:"pods,omitempty"`
	Nodes       *metav1.LabelSelector `json:"nodes,omitempty"`
	Networks    []string              `json:"networks,omitempty"`
	DomainNames []string              `json:"domainNames,omitempty"`
}

// CNPProtocol is one protocol match: exactly one field.
type CNPProtocol struct {
	TCP                  *CNPPorts `json:"tcp,omitempty"`
	UDP                  *CNPPorts `json:"udp,omitempty"`
	SCTP                 *CNPPorts `json:"sctp,omitempty"`
	DestinationNamedPort string    `json:"destinationNamedPort,omitempty"`
}

// CNPPorts is a protocol's destination port: a number or a range; nil
// is every port.
type CNPPorts struct {
	DestinationPort *CNPPort `json:"destinationPort,omitempty"`
}

// CNPPort is a port number or an inclusive range.
type CNPPort struct {
	Number int32 `json:"number,omitempty"`
	Range  *struct {
		Start int32 `json:"start"`
		End   int32 `json:"end"`
	} `json:"range,omitempty"`
}
