package services

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Services is the services feature: VIPs with their backends, one
// Maglev table each in the datapath.
type Services struct{ c core.Core }

// New is the services feature of core c.
func New(c core.Core) *Services { return &Services{c: c} }

// newService validates a service to create or apply (its name, then
// model.Service.Validate) and returns it with its addresses unmapped and
// its creation time; it has no ID yet.
func newService(req model.Service) (*model.Service, error) {
	if !core.NameRE.MatchString(req.Name) {
		return nil, model.Fieldf("name", "%q: must be 1-64 letters, digits, '_', '.' or '-'", req.Name)
	}
	s := req
	s.ID, s.Created = 0, time.Now().UTC()
	s.VIP = netip.AddrPortFrom(s.VIP.Addr().Unmap(), s.VIP.Port())
	s.Backends = unmapBackends(s.Backends)
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// unmapBackends copies bs with IPv4-mapped addresses unmapped.
func unmapBackends(bs []model.Backend) []model.Backend {
	if bs == nil {
		return nil
	}
	out := make([]model.Backend, len(bs))
	for i, b := range bs {
		out[i] = model.Backend{Addr: netip.AddrPortFrom(b.Addr.Addr().Unmap(), b.Addr.Port()), Weight: b.Weight}
	}
	return out
}

// Create validates and programs a service VIP.
func (sv *Services) Create(req model.Service) (*model.Service, error) {
	sv.c.Lock()
	defer sv.c.Unlock()
	if err := sv.dp().Available(); err != nil {
		return nil, fmt.Errorf("create service: %w", err)
	}
	s, err := newService(req)
	if err != nil {
		return nil, err
	}
	applied := false
	err = sv.c.Store().Update(func(tx *store.Tx) error {
		if _, err := tx.Service(s.Name); err == nil {
			return model.Conflictf("service %q already exists", s.Name)
		}
		if other, err := tx.ServiceByVIP(s.VIP, s.Proto); err != nil {
			return err
		} else if other != "" {
			return model.Conflictf("vip %s/%s is service %q's", s.VIP, s.Proto, other)
		}
		if err := checkVIPSubnets(tx, "vip", s.VIP.Addr()); err != nil {
			return err
		}
		if s.ID, err = tx.NextServiceID(); err != nil {
			return err
		}
		applied = true
		if err := sv.dp().PutService(*s); err != nil {
			return err
		}
		return tx.PutService(s)
	})
	if err != nil {
		if applied {
			sv.dp().DeleteService(*s)
		}
		return nil, err
	}
	sv.c.Log().Info("service created", "service", s.Name, "vip", s.VIP, "backends", len(s.Backends))
	return s, nil
}

// Update replaces a service's backend set (weight 0 drains one;
// a backend left out is removed). Established flows keep their backend.
func (sv *Services) Update(name string, req model.ServiceUpdate) (*model.Service, error) {
	sv.c.Lock()
	defer sv.c.Unlock()
	if err := sv.dp().Available(); err != nil {
		return nil, fmt.Errorf("update service: %w", err)
	}
	var s *model.Service
	err := sv.c.Store().Update(func(tx *store.Tx) error {
		var err error
		if s, err = tx.Service(name); err != nil {
			return err
		}
		old := *s
		// A request that changes only the affinity (backends null, not
		// []) keeps the backends.
		keep := req.Backends == nil && (req.Affinity != nil || req.AffinityTimeout != nil)
		if !keep {
			s.Backends = unmapBackends(req.Backends)
			if err := s.CheckBackends(); err != nil {
				return err
			}
		}
		if req.Affinity != nil {
			s.Affinity = *req.Affinity
			if !s.Affinity {
				s.AffinityTimeout = 0
			}
		}
		if req.AffinityTimeout != nil {
			s.AffinityTimeout = *req.AffinityTimeout
		}
		if err := s.CheckAffinity(); err != nil {
			return err
		}
		if err := sv.dp().PutService(*s); err != nil {
			sv.dp().PutService(old)
			return err
		}
		return tx.PutService(s)
	})
	if err != nil {
		return nil, err
	}
	sv.c.Log().Info("service updated", "service", name, "backends", len(s.Backends))
	return s, nil
}

// Delete removes a service; a missing one is not an error.
func (sv *Services) Delete(name string) error {
	sv.c.Lock()
	defer sv.c.Unlock()
	return sv.c.Store().Update(func(tx *store.Tx) error {
		s, err := tx.Service(name)
		if errors.Is(err, model.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := sv.dp().DeleteService(*s); err != nil {
			return err
		}
		return tx.DeleteService(name)
	})
}

// List lists services.
func (sv *Services) List() ([]model.Service, error) {
	var out []model.Service
	err := sv.c.Store().View(func(tx *store.Tx) error {
		var err error
		out, err = tx.Services()
		return err
	})
	return out, err
}

// Get returns one service.
func (sv *Services) Get(name string) (*model.Service, error) {
	var out *model.Service
	err := sv.c.Store().View(func(tx *store.Tx) error {
		var err error
		out, err = tx.Service(name)
		return err
	})
	return out, err
}

// Reconcile programs every stored service (one batch) and removes
// the datapath's services the store does not know.
func (sv *Services) Reconcile() error {
	svcs, err := sv.List()
	if err != nil {
		return err
	}
	want := map[uint32]bool{}
	for i := range svcs {
		want[svcs[i].ID] = true
	}
	errs := []error{sv.dp().PutServices(svcs)}
	have, err := sv.dp().ServiceIDs()
	errs = append(errs, err)
	var stale []model.Service
	for id, s := range have {
		if !want[id] {
			stale = append(stale, s)
		}
	}
	errs = append(errs, sv.dp().DeleteServices(stale))
	return errors.Join(errs...)
}

func (sv *Services) dp() datapath.Datapath { return sv.c.Datapath() }
