package services

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Apply creates or updates (by name) the services of req, and
// with req.Prune removes the others (those named with req.PrunePrefix,
// when it is given), and removes those of req.Delete, in one store transaction and one
// batch of datapath updates: all or nothing. A listed service that exists
// keeps its VIP (a different one is refused: delete it first) and gets
// the listed backends and affinity; one that is equal is left alone.
func (sv *Services) Apply(req model.ServiceApply) (*model.ServiceApplyResult, error) {
	sv.c.Lock()
	defer sv.c.Unlock()
	if err := sv.dp().Available(); err != nil {
		return nil, fmt.Errorf("apply services: %w", err)
	}
	want := make([]*model.Service, len(req.Services))
	byName := make(map[string]int, len(req.Services))
	byVIP := make(map[string]int, len(req.Services))
	for i, r := range req.Services {
		s, err := newService(r)
		if err != nil {
			return nil, model.IndexedField("services", i, err)
		}
		if j, dup := byName[s.Name]; dup {
			return nil, model.Fieldf(fmt.Sprintf("services[%d].name", i), "%q: listed twice (also services[%d])", s.Name, j)
		}
		vk := s.Key()
		if j, dup := byVIP[vk]; dup {
			return nil, model.Fieldf(fmt.Sprintf("services[%d].vip", i), "%s: listed twice (also services[%d], %q)", vk, j, want[j].Name)
		}
		byName[s.Name], byVIP[vk] = i, i
		want[i] = s
	}

	var res model.ServiceApplyResult
	var created, pruned []*model.Service
	var updated, olds []*model.Service // updated[i] replaces olds[i]
	applied := false
	rollback := func() {
		// What the datapath got is taken back: new services out,
		// updated ones as they were, pruned ones in again.
		var errs []error
		errs = append(errs, sv.dp().DeleteServices(dpServices(created)))
		errs = append(errs, sv.dp().PutServices(dpServices(olds)))
		errs = append(errs, sv.dp().PutServices(dpServices(pruned)))
		if err := errors.Join(errs...); err != nil {
			sv.c.Log().Error("apply services: roll back the datapath", "err", err)
		}
	}
	err := sv.c.Store().Update(func(tx *store.Tx) error {
		for i, s := range want {
			if err := checkVIPSubnets(tx, fmt.Sprintf("services[%d].vip", i), s.VIP.Addr()); err != nil {
				return err
			}
		}
		for _, s := range want {
			old, err := tx.Service(s.Name)
			switch {
			case errors.Is(err, model.ErrNotFound):
				if other, err := tx.ServiceByVIP(s.VIP, s.Proto); err != nil {
					return err
				} else if other != "" {
					if _, listed := byName[other]; listed || !prunable(req, other) && !slices.Contains(req.Delete, other) {
						return model.Conflictf("service %q: vip %s/%s is service %q's", s.Name, s.VIP, s.Proto, other)
					}
					// other is pruned below: its VIP comes free in
					// the same transaction. Deleting it first keeps
					// the datapath's VIP entry for the new service.
					o, err := tx.Service(other)
					if err != nil {
						return err
					}
					if err := tx.DeleteService(other); err != nil {
						return err
					}
					pruned = append(pruned, o)
				}
				if s.ID, err = tx.NextServiceID(); err != nil {
					return err
				}
				created = append(created, s)
			case err != nil:
				return err
			case old.VIP != s.VIP || old.Proto != s.Proto:
				return model.Conflictf("service %q has vip %s/%s, not %s/%s: remove it first", s.Name, old.VIP, old.Proto, s.VIP, s.Proto)
			case old.Affinity == s.Affinity && old.AffinityTimeout == s.AffinityTimeout && slices.Equal(old.Backends, s.Backends):
				res.Unchanged++
				continue
			default:
				s.ID, s.Created = old.ID, old.Created
				updated, olds = append(updated, s), append(olds, old)
			}
		}
		if err := tx.PutServices(append(slices.Clone(created), updated...)); err != nil {
			return err
		}
		for i, name := range req.Delete {
			if _, listed := byName[name]; listed {
				return model.Fieldf(fmt.Sprintf("delete[%d]", i), "%q: also listed in services", name)
			}
			o, err := tx.Service(name)
			if errors.Is(err, model.ErrNotFound) || err == nil && slices.ContainsFunc(pruned, func(p *model.Service) bool { return p.Name == name }) {
				continue
			}
			if err != nil {
				return err
			}
			if err := tx.DeleteService(name); err != nil {
				return err
			}
			pruned = append(pruned, o)
		}
		if req.Prune {
			names, err := tx.ServiceNames()
			if err != nil {
				return err
			}
			for _, name := range names {
				if _, listed := byName[name]; listed || !prunable(req, name) {
					continue
				}
				o, err := tx.Service(name)
				if err != nil {
					return err
				}
				if err := tx.DeleteService(name); err != nil {
					return err
				}
				pruned = append(pruned, o)
			}
		}
		applied = true
		// Pruned first: a VIP moving from a pruned service to a new one
		// is the new one's once its entry is written.
		if err := sv.dp().DeleteServices(dpServices(pruned)); err != nil {
			return err
		}
		return sv.dp().PutServices(dpServices(append(slices.Clone(created), updated...)))
	})
	if err != nil {
		if applied {
			rollback()
		}
		return nil, err
	}
	res.Created, res.Updated, res.Deleted = len(created), len(updated), len(pruned)
	err = sv.c.Store().View(func(tx *store.Tx) error {
		n, err := tx.ServiceCount()
		res.Services = n
		return err
	})
	sv.c.Log().Info("services applied", "created", res.Created, "updated", res.Updated, "unchanged", res.Unchanged, "deleted", res.Deleted)
	return &res, err
}

// prunable reports whether an apply removes the unlisted service name.
func prunable(req model.ServiceApply, name string) bool {
	return req.Prune && strings.HasPrefix(name, req.PrunePrefix)
}

// dpServices is svcs by value, as the datapath takes them.
func dpServices(svcs []*model.Service) []model.Service {
	out := make([]model.Service, 0, len(svcs))
	for _, s := range svcs {
		out = append(out, *s)
	}
	return out
}
