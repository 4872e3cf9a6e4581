package store

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/xlane-dev/xlane/internal/model"
)

var (
	bucketServices   = []byte("services")     // name -> model.Service (JSON)
	bucketServiceVIP = []byte("service-vips") // "VIP/proto" -> name: the index that keeps creation O(log n)
)

func vipKey(s *model.Service) []byte { return []byte(s.VIP.String() + "/" + s.Proto) }

// services creates the service buckets; a store written before the VIP
// index existed gets it built here, once.
func (t *Tx) services() error {
	b, err := t.tx.CreateBucketIfNotExists(bucketServices)
	if err != nil {
		return err
	}
	if t.tx.Bucket(bucketServiceVIP) != nil {
		return nil
	}
	idx, err := t.tx.CreateBucket(bucketServiceVIP)
	if err != nil {
		return err
	}
	all, err := list[model.Service](b, "service")
	if err != nil {
		return err
	}
	for i := range all {
		if err := idx.Put(vipKey(&all[i]), []byte(all[i].Name)); err != nil {
			return err
		}
	}
	return nil
}

// ServiceByVIP returns the name of the service on vip/proto, "" if none.
func (t *Tx) ServiceByVIP(vip netip.AddrPort, proto string) (string, error) {
	key := vipKey(&model.Service{VIP: vip, Proto: proto})
	if idx := t.tx.Bucket(bucketServiceVIP); idx != nil {
		return string(idx.Get(key)), nil
	}
	all, err := t.Services() // read-only view of a store without the index
	if err != nil {
		return "", err
	}
	for i := range all {
		if string(vipKey(&all[i])) == string(key) {
			return all[i].Name, nil
		}
	}
	return "", nil
}

// Service returns the service called name, or model.ErrNotFound.
func (t *Tx) Service(name string) (*model.Service, error) {
	if b := t.tx.Bucket(bucketServices); b != nil {
		return get[model.Service](b, name, "service")
	}
	return nil, model.NotFoundf("service %q", name)
}

// Services returns every service, by name.
func (t *Tx) Services() ([]model.Service, error) {
	if b := t.tx.Bucket(bucketServices); b != nil {
		return list[model.Service](b, "service")
	}
	return nil, nil
}

// ServiceNames returns every service's name, in order, without decoding
// the services (a full-set apply's prune pass reads thousands).
func (t *Tx) ServiceNames() ([]string, error) {
	b := t.tx.Bucket(bucketServices)
	if b == nil {
		return nil, nil
	}
	var out []string
	err := b.ForEach(func(k, _ []byte) error {
		out = append(out, string(k))
		return nil
	})
	return out, err
}

// PutService creates or replaces s.
func (t *Tx) PutService(s *model.Service) error {
	if err := t.services(); err != nil {
		return err
	}
	idx := t.tx.Bucket(bucketServiceVIP)
	if old, err := t.Service(s.Name); err == nil && string(vipKey(old)) != string(vipKey(s)) {
		if err := idx.Delete(vipKey(old)); err != nil {
			return err
		}
	}
	if err := idx.Put(vipKey(s), []byte(s.Name)); err != nil {
		return err
	}
	return put(t.tx.Bucket(bucketServices), s.Name, s)
}

// DeleteService removes a service. Missing is not an error.
func (t *Tx) DeleteService(name string) error {
	if err := t.services(); err != nil {
		return err
	}
	s, err := t.Service(name)
	if err != nil {
		return nil // missing
	}
	if err := t.tx.Bucket(bucketServiceVIP).Delete(vipKey(s)); err != nil {
		return err
	}
	return t.tx.Bucket(bucketServices).Delete([]byte(name))
}

// NextServiceID returns a fresh, never reused service ID (> 0).
func (t *Tx) NextServiceID() (uint32, error) {
	if err := t.services(); err != nil {
		return 0, err
	}
	seq, err := t.tx.Bucket(bucketServices).NextSequence()
	return uint32(seq), err
}

// ServiceCount returns how many services there are.
func (t *Tx) ServiceCount() (int, error) {
	b := t.tx.Bucket(bucketServices)
	if b == nil {
		return 0, nil
	}
	return b.Stats().KeyN, nil
}

// PutServices creates or replaces many services, each bucket's keys put
// in key order: bbolt splits nodes only at commit, so keys put out of
// order into one node cost a move of the node's tail each (100,000 new
// services: quadratic, most of an apply's time).
func (t *Tx) PutServices(svcs []*model.Service) error {
	if err := t.services(); err != nil {
		return err
	}
	idx, b := t.tx.Bucket(bucketServiceVIP), t.tx.Bucket(bucketServices)
	type kv struct{ k, v []byte }
	var index, recs []kv
	for _, s := range svcs {
		if old, err := t.Service(s.Name); err == nil && string(vipKey(old)) != string(vipKey(s)) {
			if err := idx.Delete(vipKey(old)); err != nil {
				return err
			}
		}
		raw, err := json.Marshal(s)
		if err != nil {
			return err
		}
		index = append(index, kv{vipKey(s), []byte(s.Name)})
		recs = append(recs, kv{[]byte(s.Name), raw})
	}
	for _, l := range []struct {
		b   *bolt.Bucket
		kvs []kv
	}{{idx, index}, {b, recs}} {
		slices.SortFunc(l.kvs, func(x, y kv) int { return bytes.Compare(x.k, y.k) })
		for _, e := range l.kvs {
			if err := l.b.Put(e.k, e.v); err != nil {
				return err
			}
		}
	}
	return nil
}
