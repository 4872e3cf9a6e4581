package store

import (
	"github.com/xlane-dev/xlane/internal/model"
)

var bucketServices = []byte("services") // name -> model.Service (JSON)

func (t *Tx) services() error {
	_, err := t.tx.CreateBucketIfNotExists(bucketServices)
	return err
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

// PutService creates or replaces s.
func (t *Tx) PutService(s *model.Service) error {
	if err := t.services(); err != nil {
		return err
	}
	return put(t.tx.Bucket(bucketServices), s.Name, s)
}

// DeleteService removes a service. Missing is not an error.
func (t *Tx) DeleteService(name string) error {
	if b := t.tx.Bucket(bucketServices); b != nil {
		return b.Delete([]byte(name))
	}
	return nil
}

// NextServiceID returns a fresh, never reused service ID (> 0).
func (t *Tx) NextServiceID() (uint32, error) {
	if err := t.services(); err != nil {
		return 0, err
	}
	seq, err := t.tx.Bucket(bucketServices).NextSequence()
	return uint32(seq), err
}
