package daemon

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

func dpService(s *model.Service) datapath.Service {
	out := datapath.Service{ID: s.ID, VIP: s.VIP, Proto: protoNumber(s.Proto), Affinity: s.Affinity,
		AffinityTimeout: uint32(s.EffectiveAffinityTimeout())}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, datapath.Backend{Addr: b.Addr, Weight: b.Weight})
	}
	return out
}

func parseBackends(specs []string, vip model.Service) ([]model.Backend, error) {
	var out []model.Backend
	seen := map[string]bool{}
	for _, s := range specs {
		b, err := model.ParseBackend(s)
		if err != nil {
			return nil, err
		}
		if b.Addr.Addr().Is4() != vip.VIP.Addr().Is4() {
			return nil, model.Fieldf("backends", "%q: address family differs from the VIP %s", s, vip.VIP)
		}
		if seen[b.Addr.String()] {
			return nil, model.Fieldf("backends", "%q: listed twice", s)
		}
		seen[b.Addr.String()] = true
		out = append(out, b)
	}
	if len(out) > int(1<<20) {
		return nil, model.Fieldf("backends", "too many backends (%d)", len(out))
	}
	return out, nil
}

// checkAffinity validates a service's affinity timeout.
func checkAffinity(s *model.Service) error {
	switch t := s.AffinityTimeout; {
	case t < 0 || t > model.MaxAffinityTimeout:
		return model.Fieldf("affinity_timeout", "%d: want 1-%d seconds (0: %d)", t, model.MaxAffinityTimeout, model.DefaultAffinityTimeout)
	case t != 0 && !s.Affinity:
		return model.Fieldf("affinity_timeout", "%d: only with affinity", t)
	}
	return nil
}

// parseService validates a create request into a service (no ID yet).
func parseService(req api.ServiceCreate) (*model.Service, error) {
	if !core.NameRE.MatchString(req.Name) {
		return nil, model.Fieldf("name", "%q: must be 1-64 letters, digits, '_', '.' or '-'", req.Name)
	}
	s := &model.Service{Name: req.Name, Affinity: req.Affinity, AffinityTimeout: req.AffinityTimeout, Created: time.Now().UTC(), Proto: "tcp"}
	if err := checkAffinity(s); err != nil {
		return nil, err
	}
	vip, proto, hasProto := strings.Cut(req.VIP, "/")
	if hasProto {
		if proto != "tcp" && proto != "udp" {
			return nil, model.Fieldf("vip", "%q: protocol %q is not tcp or udp", req.VIP, proto)
		}
		s.Proto = proto
	}
	ap, err := parseAddrPort(vip)
	if err != nil {
		return nil, model.Fieldf("vip", "%q: want IP:PORT[/tcp|udp] (IPv6: [ADDR]:PORT)", req.VIP)
	}
	if p := model.VIPAddrProblem(ap.Addr()); p != "" {
		return nil, model.Fieldf("vip", "%q: %s", req.VIP, p)
	}
	s.VIP = ap
	if s.Backends, err = parseBackends(req.Backends, *s); err != nil {
		return nil, err
	}
	return s, nil
}

// CreateService validates and programs a service VIP.
func (d *Daemon) CreateService(req api.ServiceCreate) (*model.Service, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.dp.Available(); err != nil {
		return nil, fmt.Errorf("create service: %w", err)
	}
	s, err := parseService(req)
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
		if err := d.dp.PutService(dpService(s)); err != nil {
			return err
		}
		return tx.PutService(s)
	})
	if err != nil {
		if applied {
			d.dp.DeleteService(dpService(s))
		}
		return nil, err
	}
	d.log.Info("service created", "service", s.Name, "vip", s.VIP, "backends", len(s.Backends))
	return s, nil
}

// UpdateService replaces a service's backend set (weight 0 drains one;
// a backend left out is removed). Established flows keep their backend.
func (d *Daemon) UpdateService(name string, req api.ServiceUpdate) (*model.Service, error) {
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
			if s.Backends, err = parseBackends(req.Backends, *s); err != nil {
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
		if err := checkAffinity(s); err != nil {
			return err
		}
		if err := d.dp.PutService(dpService(s)); err != nil {
			d.dp.PutService(dpService(&old))
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
		if err := d.dp.DeleteService(dpService(s)); err != nil {
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
	put := make([]datapath.Service, 0, len(svcs))
	for i := range svcs {
		want[svcs[i].ID] = true
		put = append(put, dpService(&svcs[i]))
	}
	errs := []error{d.dp.PutServices(put)}
	have, err := d.dp.ServiceIDs()
	errs = append(errs, err)
	var stale []datapath.Service
	for id, s := range have {
		if !want[id] {
			stale = append(stale, s)
		}
	}
	errs = append(errs, d.dp.DeleteServices(stale))
	return errors.Join(errs...)
}
