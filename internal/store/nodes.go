package store

import "github.com/xlane-dev/xlane/internal/model"

var bucketNodes = []byte("nodes") // name -> model.Node (JSON)

// Node returns the node called name, or model.ErrNotFound.
func (t *Tx) Node(name string) (*model.Node, error) {
	if b := t.tx.Bucket(bucketNodes); b != nil {
		return get[model.Node](b, name, "node")
	}
	return nil, model.NotFoundf("node %q", name)
}

// Nodes returns every node, by name.
func (t *Tx) Nodes() ([]model.Node, error) {
	if b := t.tx.Bucket(bucketNodes); b != nil {
		return list[model.Node](b, "node")
	}
	return nil, nil
}

// PutNode creates or replaces n.
func (t *Tx) PutNode(n *model.Node) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketNodes)
	if err != nil {
		return err
	}
	c := *n
	c.Liveness, c.Encryption = nil, nil // the daemon's view, not a record's
	return put(b, n.Name, &c)
}

// DeleteNode removes a node. Missing is not an error.
func (t *Tx) DeleteNode(name string) error {
	if b := t.tx.Bucket(bucketNodes); b != nil {
		return b.Delete([]byte(name))
	}
	return nil
}

// NextNodeID returns a fresh, never reused node ID (> 0).
func (t *Tx) NextNodeID() (uint32, error) {
	b, err := t.tx.CreateBucketIfNotExists(bucketNodes)
	if err != nil {
		return 0, err
	}
	seq, err := b.NextSequence()
	return uint32(seq), err
}
