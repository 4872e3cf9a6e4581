package store

import (
	"encoding/json"
	"fmt"
	"net/netip"

	bolt "go.etcd.io/bbolt"

	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

var (
	// firewall: "rules" -> rules.RuleSet, "slots" -> rule name -> counter
	// slot, "ddos" -> rules.DDoS (JSON).
	bucketFirewall = []byte("firewall")
	// fw_blocklist: prefix (family byte, 16 address bytes, length) -> "".
	bucketFwBlock = []byte("fw_blocklist")
)

func (t *Tx) fwBucket(name []byte) (*bolt.Bucket, error) {
	if b := t.tx.Bucket(name); b != nil {
		return b, nil
	}
	if !t.tx.Writable() {
		return nil, nil
	}
	return t.tx.CreateBucketIfNotExists(name)
}

func (t *Tx) fwGet(key string, v any) (bool, error) {
	b, err := t.fwBucket(bucketFirewall)
	if err != nil || b == nil {
		return false, err
	}
	raw := b.Get([]byte(key))
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("decode firewall %s: %w", key, err)
	}
	return true, nil
}

func (t *Tx) fwPut(key string, v any) error {
	b, err := t.fwBucket(bucketFirewall)
	if err != nil {
		return err
	}
	return put(b, key, v)
}

// FirewallRules returns the rule set in force (empty when none).
func (t *Tx) FirewallRules() (*rules.RuleSet, error) {
	var rs rules.RuleSet
	_, err := t.fwGet("rules", &rs)
	return &rs, err
}

// PutFirewallRules records the rule set in force.
func (t *Tx) PutFirewallRules(rs *rules.RuleSet) error { return t.fwPut("rules", rs) }

// FirewallSlots returns every rule's counter slot, by rule name.
func (t *Tx) FirewallSlots() (map[string]uint32, error) {
	s := map[string]uint32{}
	_, err := t.fwGet("slots", &s)
	return s, err
}

// PutFirewallSlots records the counter slots.
func (t *Tx) PutFirewallSlots(s map[string]uint32) error { return t.fwPut("slots", s) }

// FirewallDDoS returns the uplink's DDoS settings (zero: off).
func (t *Tx) FirewallDDoS() (rules.DDoS, error) {
	var d rules.DDoS
	_, err := t.fwGet("ddos", &d)
	return d, err
}

// PutFirewallDDoS records them.
func (t *Tx) PutFirewallDDoS(d rules.DDoS) error { return t.fwPut("ddos", d) }

func blockKey(p netip.Prefix) []byte {
	k := make([]byte, 18)
	if p.Addr().Is4() {
		k[0] = 4
	} else {
		k[0] = 6
	}
	a := p.Addr().As16()
	copy(k[1:17], a[:])
	k[17] = byte(p.Bits())
	return k
}

// PutBlocked adds prefixes to the blocklist.
func (t *Tx) PutBlocked(ps []netip.Prefix) error {
	b, err := t.fwBucket(bucketFwBlock)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := b.Put(blockKey(p), nil); err != nil {
			return err
		}
	}
	return nil
}

// DeleteBlocked removes prefixes from the blocklist (missing is fine).
func (t *Tx) DeleteBlocked(ps []netip.Prefix) error {
	b, err := t.fwBucket(bucketFwBlock)
	if err != nil || b == nil {
		return err
	}
	for _, p := range ps {
		if err := b.Delete(blockKey(p)); err != nil {
			return err
		}
	}
	return nil
}

// FlushBlocked empties the blocklist.
func (t *Tx) FlushBlocked() error {
	if t.tx.Bucket(bucketFwBlock) == nil {
		return nil
	}
	if err := t.tx.DeleteBucket(bucketFwBlock); err != nil {
		return err
	}
	_, err := t.tx.CreateBucket(bucketFwBlock)
	return err
}

// Blocked calls fn for every blocklisted prefix (stop: return false).
func (t *Tx) Blocked(fn func(netip.Prefix) bool) error {
	b := t.tx.Bucket(bucketFwBlock)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) != 18 {
			return fmt.Errorf("blocklist key of %d bytes", len(k))
		}
		a := netip.AddrFrom16([16]byte(k[1:17]))
		if k[0] == 4 {
			a = a.Unmap()
		}
		if !fn(netip.PrefixFrom(a, int(k[17]))) {
			return nil
		}
	}
	return nil
}

// BlockedCount is the number of blocklisted prefixes.
func (t *Tx) BlockedCount() int {
	b := t.tx.Bucket(bucketFwBlock)
	if b == nil {
		return 0
	}
	return b.Stats().KeyN
}
