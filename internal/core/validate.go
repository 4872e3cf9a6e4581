package core

import (
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// NetworkCheck is the point of a network's validation at which the core
// calls the features' checks (NetworkValidator), in this order, inside the
// store transaction and before anything is applied.
type NetworkCheck int

const (
	// CheckName: the name is well-formed, nothing else is read (n is
	// nil): the calibration's reserved names.
	CheckName NetworkCheck = iota
	// CheckDefaults: mode, masquerade, policy and device are resolved,
	// the subnets not yet parsed: a feature may fill in the request's
	// defaults (the cluster's pod CIDRs).
	CheckDefaults
	// CheckShape: subnets, gateways and VLAN are set on n, the MTU not
	// yet defaulted (req.MTU is what was asked): the cluster's overlay
	// MTU.
	CheckShape
)

// NetworkValidator is a feature's check of a network being created; the
// core calls it at every NetworkCheck, and the first error refuses the
// network (it names the bad field).
type NetworkValidator interface {
	ValidateNetwork(tx *store.Tx, at NetworkCheck, req *api.NetworkCreate, n *model.Network) error
}

// EndpointValidator is a feature's check of an endpoint being added (a
// CNI ADD, `xlane endpoint add`): the core calls each once its own checks
// have passed (the network exists; the ID, interface name, namespace,
// addresses and MAC are well-formed; e's device names are set), inside
// the store transaction and before anything is applied. A feature checks
// the request's fields that are its own and sets its part of e (the VM
// feature: the tap, the queues, the backend); the first error refuses the
// endpoint (it names the bad field).
type EndpointValidator interface {
	ValidateEndpoint(tx *store.Tx, req *api.EndpointAdd, e *model.Endpoint, n *model.Network) error
}
