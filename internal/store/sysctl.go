package store

import (
	"encoding/json"
	"fmt"
)

// bucketSysctls: sysctl path (as under /proc/sys) -> its value before xlane
// first changed it (JSON string). `xlaned --uninstall` writes them back.
var bucketSysctls = []byte("sysctls")

// SavedSysctls returns the recorded values (empty when none).
func (t *Tx) SavedSysctls() (map[string]string, error) {
	out := map[string]string{}
	b := t.tx.Bucket(bucketSysctls)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("decode saved sysctl %s: %w", k, err)
		}
		out[string(k)] = s
		return nil
	})
	return out, err
}

// SaveSysctls records values of sysctls not recorded yet: the value to
// restore is the one before xlane's first change, not a later one.
func (t *Tx) SaveSysctls(vals map[string]string) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketSysctls)
	if err != nil {
		return err
	}
	for k, v := range vals {
		if b.Get([]byte(k)) != nil {
			continue
		}
		raw, _ := json.Marshal(v)
		if err := b.Put([]byte(k), raw); err != nil {
			return err
		}
	}
	return nil
}
