package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/xlane-dev/xlane/internal/accel"
)

// sock (acceleration and proxy redirects share it): "accel" -> AccelRecord
// (this file), "proxy/<direction>:<netns or cgroup>:<port>"
// (ProxyRecord.Key) -> ProxyRecord (JSON). Records written before
// redirects had a key of their own sit under "proxy/<port>"; they are read
// as well and replaced by the keyed one at their next write or delete.
var bucketSock = []byte("sock")

// AccelRecord is the acceleration the user asked for.
type AccelRecord struct {
	Enabled bool         `json:"enabled"`
	Config  accel.Config `json:"config"`
}

func (t *Tx) sockBucket() (*bolt.Bucket, error) { return t.fwBucket(bucketSock) }

// Accel returns the acceleration record (zero when none).
func (t *Tx) Accel() (AccelRecord, error) {
	var r AccelRecord
	b, err := t.sockBucket()
	if err != nil || b == nil {
		return r, err
	}
	if raw := b.Get([]byte("accel")); raw != nil {
		if err := json.Unmarshal(raw, &r); err != nil {
			return r, fmt.Errorf("decode acceleration record: %w", err)
		}
	}
	return r, nil
}

// PutAccel writes it.
func (t *Tx) PutAccel(r AccelRecord) error {
	b, err := t.sockBucket()
	if err != nil {
		return err
	}
	return put(b, "accel", r)
}
