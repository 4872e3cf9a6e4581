package store

import "fmt"

// wireguard: "private_key" -> this node's WireGuard private key (32 raw
// bytes; the state file is 0600 and the key leaves it only for the
// WireGuard device, never for the API or a log); "encryption" -> the
// node's encryption setting as last started (xlaned --encryption).
var bucketWireGuard = []byte("wireguard")

// WireGuardKey returns the stored private key, nil before the first start
// with encryption.
func (t *Tx) WireGuardKey() ([]byte, error) {
	b, err := t.fwBucket(bucketWireGuard)
	if err != nil || b == nil {
		return nil, err
	}
	raw := b.Get([]byte("private_key"))
	if raw == nil {
		return nil, nil
	}
	if len(raw) != 32 {
		return nil, fmt.Errorf("stored WireGuard private key: %d bytes, want 32", len(raw))
	}
	return append([]byte(nil), raw...), nil
}

// PutWireGuardKey stores the private key.
func (t *Tx) PutWireGuardKey(key []byte) error {
	if len(key) != 32 {
		return fmt.Errorf("WireGuard private key: %d bytes, want 32", len(key))
	}
	b, err := t.fwBucket(bucketWireGuard)
	if err != nil {
		return err
	}
	return b.Put([]byte("private_key"), key)
}

// Encryption returns the encryption setting recorded at the last start
// ("" none: never started with one, or off).
func (t *Tx) Encryption() (string, error) {
	b, err := t.fwBucket(bucketWireGuard)
	if err != nil || b == nil {
		return "", err
	}
	return string(b.Get([]byte("encryption"))), nil
}

// PutEncryption records the encryption setting ("": off).
func (t *Tx) PutEncryption(mode string) error {
	b, err := t.fwBucket(bucketWireGuard)
	if err != nil {
		return err
	}
	if mode == "" {
		return b.Delete([]byte("encryption"))
	}
	return b.Put([]byte("encryption"), []byte(mode))
}
