package store

import (
	"encoding/json"
	"fmt"

	"github.com/xlane-dev/xlane/internal/cnp"
)

// policies: "cnp" -> the standalone ClusterNetworkPolicies
// ([]cnp.ClusterNetworkPolicy as JSON, sorted by name; internal/policy).
var bucketPolicies = []byte("policies")

// Policies returns the standalone ClusterNetworkPolicies (none: nil).
func (t *Tx) Policies() ([]cnp.ClusterNetworkPolicy, error) {
	b := t.tx.Bucket(bucketPolicies)
	if b == nil {
		return nil, nil
	}
	raw := b.Get([]byte("cnp"))
	if raw == nil {
		return nil, nil
	}
	var ps []cnp.ClusterNetworkPolicy
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, fmt.Errorf("decode policies: %w", err)
	}
	return ps, nil
}

// PutPolicies records the standalone ClusterNetworkPolicies.
func (t *Tx) PutPolicies(ps []cnp.ClusterNetworkPolicy) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketPolicies)
	if err != nil {
		return err
	}
	return put(b, "cnp", ps)
}
