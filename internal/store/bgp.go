package store

import (
	"net/netip"

	"github.com/xlane-dev/xlane/internal/model"
)

// The BGP speaker's and the LoadBalancer pools' buckets (internal/bgp,
// internal/lbipam), created on first write.
var (
	bucketBGPPeers = []byte("bgp_peers") // peer address -> model.BGPPeer (JSON)
	bucketLBPools  = []byte("lb_pools")  // pool name -> model.LBPool (JSON)
)

// BGPPeer returns the peer at addr, or model.ErrNotFound.
func (t *Tx) BGPPeer(addr netip.Addr) (*model.BGPPeer, error) {
	if b := t.tx.Bucket(bucketBGPPeers); b != nil {
		return get[model.BGPPeer](b, addr.String(), "bgp peer")
	}
	return nil, model.NotFoundf("bgp peer %q", addr)
}

// BGPPeers returns every peer, by address.
func (t *Tx) BGPPeers() ([]model.BGPPeer, error) {
	if b := t.tx.Bucket(bucketBGPPeers); b != nil {
		return list[model.BGPPeer](b, "bgp peer")
	}
	return nil, nil
}

// PutBGPPeer creates or replaces p.
func (t *Tx) PutBGPPeer(p *model.BGPPeer) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketBGPPeers)
	if err != nil {
		return err
	}
	return put(b, p.Address.String(), p)
}

// DeleteBGPPeer removes a peer. Missing is not an error.
func (t *Tx) DeleteBGPPeer(addr netip.Addr) error {
	if b := t.tx.Bucket(bucketBGPPeers); b != nil {
		return b.Delete([]byte(addr.String()))
	}
	return nil
}

// LBPool returns the pool called name, or model.ErrNotFound.
func (t *Tx) LBPool(name string) (*model.LBPool, error) {
	if b := t.tx.Bucket(bucketLBPools); b != nil {
		return get[model.LBPool](b, name, "lb pool")
	}
	return nil, model.NotFoundf("lb pool %q", name)
}

// LBPools returns every pool, by name.
func (t *Tx) LBPools() ([]model.LBPool, error) {
	if b := t.tx.Bucket(bucketLBPools); b != nil {
		return list[model.LBPool](b, "lb pool")
	}
	return nil, nil
}

// PutLBPool creates or replaces p.
func (t *Tx) PutLBPool(p *model.LBPool) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketLBPools)
	if err != nil {
		return err
	}
	return put(b, p.Name, p)
}

// DeleteLBPool removes a pool. Missing is not an error.
func (t *Tx) DeleteLBPool(name string) error {
	if b := t.tx.Bucket(bucketLBPools); b != nil {
		return b.Delete([]byte(name))
	}
	return nil
}
