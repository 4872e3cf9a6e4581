package model

import (
	"fmt"
	"net/netip"
	"time"
)

// Service is an L4 load-balanced VIP: the one service type from the
// Kubernetes controller (internal/k8s) and the API edge (internal/api)
// through the daemon and the store to the datapath, which encodes it into
// its maps (internal/datapath/services.go).
type Service struct {
	Name     string         `json:"name"`
	ID       uint32         `json:"id"`
	VIP      netip.AddrPort `json:"vip"`
	Proto    string         `json:"proto"` // tcp or udp
	Affinity bool           `json:"affinity,omitempty"`
	// AffinityTimeout is how long (seconds) a client keeps its backend
	// after its last new flow, with Affinity; 0: DefaultAffinityTimeout.
	AffinityTimeout int       `json:"affinity_timeout,omitempty"`
	Backends        []Backend `json:"backends"`
	Created         time.Time `json:"created"`
}

// DefaultAffinityTimeout is a ClientIP affinity's timeout when none is
// given (seconds: 3 hours, Kubernetes' default); MaxAffinityTimeout the
// longest (a day, Kubernetes' limit).
const (
	DefaultAffinityTimeout = 10800
	MaxAffinityTimeout     = 86400
)

// MaxBackends is the most backends a service has.
const MaxBackends = 1 << 20

// EffectiveAffinityTimeout is the timeout the datapath applies: 0 without
// affinity.
func (s *Service) EffectiveAffinityTimeout() int {
	switch {
	case !s.Affinity:
		return 0
	case s.AffinityTimeout == 0:
		return DefaultAffinityTimeout
	}
	return s.AffinityTimeout
}

// Key is the service's VIP and protocol, VIP/PROTO: what two services
// cannot share.
func (s *Service) Key() string { return s.VIP.String() + "/" + s.Proto }

// Validate checks everything of a service but its name (the daemon's
// naming rule) and ID: the VIP, the protocol, the affinity and the
// backends. Errors name the field.
func (s *Service) Validate() error {
	if s.Proto != "tcp" && s.Proto != "udp" {
		return Fieldf("vip", "%s: protocol %q is not tcp or udp", s.VIP, s.Proto)
	}
	if !s.VIP.IsValid() || s.VIP.Port() == 0 {
		return Fieldf("vip", "%s: want IP:PORT with a port 1-65535", s.VIP)
	}
	if p := VIPAddrProblem(s.VIP.Addr()); p != "" {
		return Fieldf("vip", "%q: %s", s.Key(), p)
	}
	if err := s.CheckAffinity(); err != nil {
		return err
	}
	return s.CheckBackends()
}

// CheckAffinity validates the affinity timeout.
func (s *Service) CheckAffinity() error {
	switch t := s.AffinityTimeout; {
	case t < 0 || t > MaxAffinityTimeout:
		return Fieldf("affinity_timeout", "%d: want 1-%d seconds (0: %d)", t, MaxAffinityTimeout, DefaultAffinityTimeout)
	case t != 0 && !s.Affinity:
		return Fieldf("affinity_timeout", "%d: only with affinity", t)
	}
	return nil
}

// CheckBackends validates the backends: each once, of the VIP's family,
// with a port and a weight of at most MaxWeight.
func (s *Service) CheckBackends() error {
	if len(s.Backends) > MaxBackends {
		return Fieldf("backends", "too many backends (%d)", len(s.Backends))
	}
	seen := make(map[netip.AddrPort]bool, len(s.Backends))
	for _, b := range s.Backends {
		switch {
		case !b.Addr.IsValid() || b.Addr.Port() == 0:
			return Fieldf("backends", "%q: want IP:PORT with a port 1-65535", b.Addr)
		case b.Addr.Addr().Is4() != s.VIP.Addr().Is4():
			return Fieldf("backends", "%q: address family differs from the VIP %s", b.Addr, s.VIP)
		case b.Weight > MaxWeight:
			return Fieldf("backends", "%q: weight %d is not from 0 (drain) to %d", b.Addr, b.Weight, MaxWeight)
		case seen[b.Addr]:
			return Fieldf("backends", "%q: listed twice", b.Addr)
		}
		seen[b.Addr] = true
	}
	return nil
}

// Backend is one service backend. Weight 0 drains it: no new flows, its
// established ones run on until they close.
type Backend struct {
	Addr   netip.AddrPort `json:"addr"`
	Weight uint32         `json:"weight"`
}

// MaxWeight is a backend's highest weight.
const MaxWeight = 1000000

// String is IP:PORT@WEIGHT, as internal/api reads it.
func (b Backend) String() string { return fmt.Sprintf("%s@%d", b.Addr, b.Weight) }

// ServiceUpdate changes a service: its backend set (a backend left out
// is removed, weight 0 drains one) and its affinity. Backends nil with
// an affinity field given keeps the backends.
type ServiceUpdate struct {
	Backends        []Backend
	Affinity        *bool
	AffinityTimeout *int
}

// ServiceApply is a batch of services to create or update (by name) in
// one transaction, all or none: a controller's sync.
type ServiceApply struct {
	Services []Service
	// Prune removes every service not listed: the request is the whole
	// set (a controller's full sync).
	Prune bool
	// PrunePrefix limits Prune to the services whose names start with
	// it: a controller owning a name space (Kubernetes mode's "k8s.")
	// leaves the others alone.
	PrunePrefix string
	// Delete removes the services named (a missing one is no error) in
	// the same transaction: a controller's incremental sync, which lists
	// only what changed.
	Delete []string
}

// ServiceApplyResult says what an apply changed.
type ServiceApplyResult struct {
	Created   int `json:"created"`
	Updated   int `json:"updated"`
	Unchanged int `json:"unchanged"`
	Deleted   int `json:"deleted"`
	// Services is how many services there are now.
	Services int `json:"services"`
}
