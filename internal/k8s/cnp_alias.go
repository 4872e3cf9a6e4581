package k8s

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/xlane-dev/xlane/internal/cnp"
)

// CNPResource is the resource the controller watches.
var CNPResource = schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1beta1", Resource: "clusternetworkpolicies"}

// The ClusterNetworkPolicy types and priorities are internal/cnp's (its
// one compiler serves this package and standalone mode); the names here
// are this package's for them.
type (
	ClusterNetworkPolicy = cnp.ClusterNetworkPolicy
	CNPSpec              = cnp.Spec
	CNPSubject           = cnp.Subject
	CNPNamespacedPod     = cnp.NamespacedPod
	CNPRule              = cnp.Rule
	CNPPeer              = cnp.Peer
	CNPProtocol          = cnp.Protocol
	CNPPorts             = cnp.Ports
	CNPPort              = cnp.Port
	CNPStatus            = cnp.Status
)

// The tiers, actions and priorities (cnp's).
const (
	CNPTierAdmin      = cnp.TierAdmin
	CNPTierBaseline   = cnp.TierBaseline
	CNPAccept         = cnp.Accept
	CNPDeny           = cnp.Deny
	CNPPass           = cnp.Pass
	CNPAdminBase      = cnp.AdminBase
	CNPBaselineBase   = cnp.BaselineBase
	CNPAdminPassTo    = cnp.AdminPassTo
	CNPBaselinePassTo = cnp.BaselinePassTo
	CNPRuleSlots      = cnp.RuleSlots
)

// An Admin Pass goes on at the NetworkPolicy tier's first rule.
var _ = [1]int{}[CNPAdminPassTo-PolicyNodePriority]
