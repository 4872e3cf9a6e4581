package lbipam

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Pools is the LoadBalancer pools' store side: create, list, remove.
type Pools struct {
	st *store.Store
}

// New returns the pools of the store.
func New(st *store.Store) *Pools { return &Pools{st: st} }

// Create validates and stores a pool: a name of the naming rule, prefixes
// that overlap no other pool's. All or nothing.
func (p *Pools) Create(pool model.LBPool) (*model.LBPool, error) {
	if err := checkPool(&pool); err != nil {
		return nil, err
	}
	pool.Created = time.Now().UTC().Truncate(time.Second)
	err := p.st.Update(func(tx *store.Tx) error {
		if _, err := tx.LBPool(pool.Name); err == nil {
			return model.Conflictf("lb pool %q exists", pool.Name)
		}
		others, err := tx.LBPools()
		if err != nil {
			return err
		}
		if err := CheckOverlap(pool, others); err != nil {
			return err
		}
		return tx.PutLBPool(&pool)
	})
	if err != nil {
		return nil, err
	}
	return &pool, nil
}

// CheckOverlap refuses a pool whose prefixes overlap another pool's.
func CheckOverlap(pool model.LBPool, others []model.LBPool) error {
	for _, o := range others {
		if o.Name == pool.Name {
			continue
		}
		for _, c := range pool.CIDRs {
			for _, oc := range o.CIDRs {
				if c.Overlaps(oc) {
					return model.Fieldf("cidrs", "%s overlaps %s of pool %q", c, oc, o.Name)
				}
			}
		}
	}
	return nil
}

// Remove removes a pool. Services keep their addresses (their VIPs are
// no longer announced by BGP).
func (p *Pools) Remove(name string) error {
	return p.st.Update(func(tx *store.Tx) error {
		if _, err := tx.LBPool(name); err != nil {
			return err
		}
		return tx.DeleteLBPool(name)
	})
}

// List returns the pools with the service VIPs inside each.
func (p *Pools) List() ([]api.LBPoolInfo, error) {
	var pools []model.LBPool
	var svcs []model.Service
	err := p.st.View(func(tx *store.Tx) error {
		var err error
		if pools, err = tx.LBPools(); err != nil {
			return err
		}
		svcs, err = tx.Services()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]api.LBPoolInfo, 0, len(pools))
	for _, pl := range pools {
		info := api.LBPoolInfo{LBPool: pl, Used: []api.LBPoolUse{}}
		for _, c := range pl.CIDRs {
			info.Size += Size(c)
		}
		for _, s := range svcs {
			if a := s.VIP.Addr().Unmap(); pl.Contains(a) {
				info.Used = append(info.Used, api.LBPoolUse{Addr: a, Service: s.Name})
			}
		}
		slices.SortFunc(info.Used, func(a, b api.LBPoolUse) int {
			return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Service, b.Service))
		})
		out = append(out, info)
	}
	return out, nil
}

// Size is how many addresses a prefix holds, capped at 2^32.
func Size(p netip.Prefix) uint64 {
	host := p.Addr().BitLen() - p.Bits()
	if host >= 32 {
		return 1 << 32
	}
	return 1 << host
}

func nameOK(name string) error {
	if !core.NameRE.MatchString(name) {
		return model.Fieldf("name", "%q: want 1-64 of A-Z a-z 0-9 _ . -, starting with a letter or digit", name)
	}
	return nil
}
