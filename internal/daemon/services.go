package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

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

// CreateService validates and programs a service VIP.
func (d *Daemon) CreateService(req model.Service) (*model.Service, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.dp.Available(); err != nil {
		return nil, fmt.Errorf("create service: %w", err)
	}
	s, err := newService(req)
	if err != nil {
		return nil, err
	}
	applied := false
	err = d.store.Update(func(tx *store.Tx) error {
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
		if err := d.dp.PutService(*s); err != nil {
			return err
		}
		return tx.PutService(s)
	})
	if err != nil {
		if applied {
			d.dp.DeleteService(*s)
		}
		return nil, err
	}
	d.log.Info("service created", "service", s.Name, "vip", s.VIP, "backends", len(s.Backends))
	return s, nil
}

// UpdateService replaces a service's backend set (weight 0 drains one;
// a backend left out is removed). Established flows keep their backend.
func (d *Daemon) UpdateService(name string, req model.ServiceUpdate) (*model.Service, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.dp.Available(); err != nil {
		return nil, fmt.Errorf("update service: %w", err)
	}
	var s *model.Service
	err := d.store.Update(func(tx *store.Tx) error {
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
		if err := d.dp.PutService(*s); err != nil {
			d.dp.PutService(old)
			return err
		}
		return tx.PutService(s)
	})
	if err != nil {
		return nil, err
	}
	d.log.Info("service updated", "service", name, "backends", len(s.Backends))
	return s, nil
}

// DeleteService removes a service; a missing one is not an error.
func (d *Daemon) DeleteService(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.store.Update(func(tx *store.Tx) error {
		s, err := tx.Service(name)
		if errors.Is(err, model.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := d.dp.DeleteService(*s); err != nil {
			return err
		}
		return tx.DeleteService(name)
	})
}

// Services lists services.
func (d *Daemon) Services() ([]model.Service, error) {
	var out []model.Service
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		out, err = tx.Services()
		return err
	})
	return out, err
}

// Service returns one service.
func (d *Daemon) Service(name string) (*model.Service, error) {
	var out *model.Service
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		out, err = tx.Service(name)
		return err
	})
	return out, err
}

// reconcileServices programs every stored service (one batch) and removes
// the datapath's services the store does not know.
func (d *Daemon) reconcileServices() error {
	svcs, err := d.Services()
	if err != nil {
		return err
	}
	want := map[uint32]bool{}
	for i := range svcs {
		want[svcs[i].ID] = true
	}
	errs := []error{d.dp.PutServices(svcs)}
	have, err := d.dp.ServiceIDs()
	errs = append(errs, err)
	var stale []model.Service
	for id, s := range have {
		if !want[id] {
			stale = append(stale, s)
		}
	}
	errs = append(errs, d.dp.DeleteServices(stale))
	return errors.Join(errs...)
}
