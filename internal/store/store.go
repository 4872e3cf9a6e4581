package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/xlane-dev/xlane/internal/model"
)

var (
	bucketNetworks  = []byte("networks")  // name -> model.Network (JSON)
	bucketEndpoints = []byte("endpoints") // id -> model.Endpoint (JSON)
	bucketLeases    = []byte("leases")    // network name -> {addr(16 bytes) -> endpoint id}
)

// Store is an open state file.
type Store struct {
	db *bolt.DB
	// onCommit runs after every committed write (OnCommit).
	onCommit atomic.Pointer[[]func()]
}

// OnCommit registers fn to run after every committed write transaction,
// outside the transaction: a feature that derives its state from the
// store (the BGP speaker) learns that something changed. fn must not
// block.
func (s *Store) OnCommit(fn func()) {
	for {
		old := s.onCommit.Load()
		var fns []func()
		if old != nil {
			fns = append(fns, *old...)
		}
		fns = append(fns, fn)
		if s.onCommit.CompareAndSwap(old, &fns) {
			return
		}
	}
}

// Open opens (or creates) the state file at path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open state %s: in use by another xlaned", path)
		}
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketNetworks, bucketEndpoints, bucketLeases} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init state %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Tx is a read or read-write transaction.
type Tx struct {
	tx *bolt.Tx
}

// View runs fn in a read-only transaction.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(&Tx{tx}) })
}

// Update runs fn in a read-write transaction; an error from fn rolls back.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if fns := s.onCommit.Load(); fns != nil {
			for _, f := range *fns {
				tx.OnCommit(f)
			}
		}
		return fn(&Tx{tx})
	})
}

func get[T any](b *bolt.Bucket, key string, what string) (*T, error) {
	raw := b.Get([]byte(key))
	if raw == nil {
		return nil, model.NotFoundf("%s %q", what, key)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decode %s %q: %w", what, key, err)
	}
	return &v, nil
}

func list[T any](b *bolt.Bucket, what string) ([]T, error) {
	var out []T
	err := b.ForEach(func(k, raw []byte) error {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode %s %q: %w", what, k, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

func put(b *bolt.Bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), raw)
}

// Network returns the network called name, or model.ErrNotFound.
func (t *Tx) Network(name string) (*model.Network, error) {
	return get[model.Network](t.tx.Bucket(bucketNetworks), name, "network")
}

// Networks returns every network, by name.
func (t *Tx) Networks() ([]model.Network, error) {
	return list[model.Network](t.tx.Bucket(bucketNetworks), "network")
}

// PutNetwork creates or replaces n.
func (t *Tx) PutNetwork(n *model.Network) error {
	return put(t.tx.Bucket(bucketNetworks), n.Name, n)
}

// DeleteNetwork removes a network and its leases. Missing is not an error.
func (t *Tx) DeleteNetwork(name string) error {
	if err := t.tx.Bucket(bucketNetworks).Delete([]byte(name)); err != nil {
		return err
	}
	err := t.tx.Bucket(bucketLeases).DeleteBucket([]byte(name))
	if err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
		return err
	}
	return nil
}

// NextNetworkID returns a fresh, never reused network ID (> 0).
func (t *Tx) NextNetworkID() (uint32, error) {
	seq, err := t.tx.Bucket(bucketNetworks).NextSequence()
	return uint32(seq), err
}

// Endpoint returns the endpoint with id, or model.ErrNotFound.
func (t *Tx) Endpoint(id string) (*model.Endpoint, error) {
	return get[model.Endpoint](t.tx.Bucket(bucketEndpoints), id, "endpoint")
}

// Endpoints returns every endpoint, by id.
func (t *Tx) Endpoints() ([]model.Endpoint, error) {
	return list[model.Endpoint](t.tx.Bucket(bucketEndpoints), "endpoint")
}

// PutEndpoint creates or replaces e.
func (t *Tx) PutEndpoint(e *model.Endpoint) error {
	return put(t.tx.Bucket(bucketEndpoints), e.ID, e)
}

// DeleteEndpoint removes an endpoint record. Missing is not an error.
func (t *Tx) DeleteEndpoint(id string) error {
	return t.tx.Bucket(bucketEndpoints).Delete([]byte(id))
}

func leaseKey(a netip.Addr) []byte {
	k := a.As16()
	return k[:]
}

// LeaseOwner returns the endpoint id holding addr in network, or "".
func (t *Tx) LeaseOwner(network string, addr netip.Addr) string {
	b := t.tx.Bucket(bucketLeases).Bucket([]byte(network))
	if b == nil {
		return ""
	}
	return string(b.Get(leaseKey(addr)))
}

// PutLease records that owner holds addr in network.
func (t *Tx) PutLease(network string, addr netip.Addr, owner string) error {
	b, err := t.tx.Bucket(bucketLeases).CreateBucketIfNotExists([]byte(network))
	if err != nil {
		return err
	}
	return b.Put(leaseKey(addr), []byte(owner))
}

// DeleteLease releases addr in network. Missing is not an error.
func (t *Tx) DeleteLease(network string, addr netip.Addr) error {
	b := t.tx.Bucket(bucketLeases).Bucket([]byte(network))
	if b == nil {
		return nil
	}
	return b.Delete(leaseKey(addr))
}

// Leases returns every lease of network: address -> owner.
func (t *Tx) Leases(network string) (map[netip.Addr]string, error) {
	out := map[netip.Addr]string{}
	b := t.tx.Bucket(bucketLeases).Bucket([]byte(network))
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		if len(k) != 16 {
			return fmt.Errorf("lease key of %d bytes in network %q", len(k), network)
		}
		out[netip.AddrFrom16([16]byte(k)).Unmap()] = string(v)
		return nil
	})
	return out, err
}
