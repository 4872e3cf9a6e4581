package cluster

import (
	"fmt"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/wireguard"
)

// Key rotation (docs/encryption.md "Key rotation"): RotateKey gives this
// node a new key pair; its peers learn the new public key in place
// (SetNodeKey: xlane node update --wg-public-key, a changed key in the
// --nodes file or on a Kubernetes Node), which keeps the node's prefixes,
// routes and its pods' flows: only the WireGuard session is made anew.

// SetNodeKey replaces a peer's WireGuard public key in place: the record,
// the device's peer (its session made anew, with a new grace) and the
// datapath entries. Refused (the field named, nothing changed): this
// node (RotateKey replaces its key), a malformed key, another node's,
// this node's own.
func (c *Cluster) SetNodeKey(name, key string) (*model.Node, error) {
	c.c.Lock()
	defer c.c.Unlock()
	if err := c.needCluster("update node"); err != nil {
		return nil, err
	}
	if c.wg == nil {
		return nil, model.Fieldf("wg_public_key", "encryption is off on this node (xlaned --encryption wireguard): no key to update")
	}
	var n, old *model.Node
	var self *model.Node
	applied := false
	err := c.c.Store().Update(func(tx *store.Tx) error {
		var err error
		if old, err = tx.Node(name); err != nil {
			return err
		}
		if old.Self {
			return model.Fieldf("wg_public_key", "node %q is this node: its key is its daemon's (xlane node rotate-key replaces it)", name)
		}
		cp := *old
		n = &cp
		nodes, err := tx.Nodes()
		if err != nil {
			return err
		}
		if err := c.validateNodeKey(nodes, n, key); err != nil {
			return err
		}
		self = SelfNode(nodes)
		applied = true
		if err := c.applyNode(n, self); err != nil {
			return err
		}
		if err := c.c.FaultPoint("node-key-applied"); err != nil {
			return err
		}
		return tx.PutNode(n)
	})
	if err != nil {
		if applied {
			if uerr := c.applyNode(old, self); uerr != nil {
				c.c.Log().Error("roll back node key", "node", name, "err", uerr)
			}
		}
		return nil, err
	}
	c.c.Log().Info("node key updated", "node", name, "wg_public_key", n.WGPublicKey)
	return n, nil
}

// RotateKey gives this node a new WireGuard key pair: stored (the state
// file, 0600), on the device, in this node's own record. Every session
// is made anew once the peers have the new public key (until then this
// node's traffic to them waits in WireGuard, then is dropped with
// --encryption-strict or falls back to cleartext without). Failing,
// nothing changed.
func (c *Cluster) RotateKey() (*api.EncryptionInfo, error) {
	c.c.Lock()
	defer c.c.Unlock()
	if err := c.needCluster("rotate key"); err != nil {
		return nil, err
	}
	if c.wg == nil {
		return nil, model.Fieldf("encryption", "off on this node (xlaned --encryption wireguard): no key pair to rotate")
	}
	k, err := wireguard.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("generate WireGuard key: %w", err)
	}
	var old []byte
	err = c.c.Store().Update(func(tx *store.Tx) error {
		prev, err := tx.WireGuardKey()
		if err != nil {
			return err
		}
		if err := tx.PutWireGuardKey(k[:]); err != nil {
			return err
		}
		nodes, err := tx.Nodes()
		if err != nil {
			return err
		}
		if self := SelfNode(nodes); self != nil {
			self.WGPublicKey = k.PublicKey().String()
			if err := tx.PutNode(self); err != nil {
				return err
			}
		}
		if err := c.wg.SetPrivateKey(k); err != nil {
			return err
		}
		old = prev
		return c.c.FaultPoint("key-rotated")
	})
	if err != nil {
		if old != nil {
			var prev wireguard.Key
			copy(prev[:], old)
			if uerr := c.wg.SetPrivateKey(prev); uerr != nil {
				c.c.Log().Error("roll back key rotation", "err", uerr)
			}
		}
		return nil, fmt.Errorf("rotate key: %w", err)
	}
	select { // the latest key only
	case <-c.keys:
	default:
	}
	c.keys <- k.PublicKey().String()
	c.c.Log().Info("WireGuard key pair rotated: give the peers the new public key (xlane node update NAME --wg-public-key KEY on each)", "public_key", k.PublicKey().String())
	return c.wg.Status(), nil
}

// KeyChanges brings this node's new public keys (RotateKey; nil alone).
func (c *Cluster) KeyChanges() <-chan string { return c.keys }

// sameButKey says whether w differs from the record h in its WireGuard
// key only (a peer's rotation: SetNodeKey, in place).
func sameButKey(h, w *model.Node) bool {
	cp := *w
	cp.WGPublicKey = h.WGPublicKey
	return !h.Self && h.WGPublicKey != w.WGPublicKey && sameNode(h, &cp)
}
