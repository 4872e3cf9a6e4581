package ipam

import (
	"net/netip"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// maxScan bounds the search for a free address in large (IPv6) subnets.
const maxScan = 1 << 20

// Reserved reports whether a is unusable for endpoints in p: the subnet
// address, the gateway, and for IPv4 the broadcast address.
func Reserved(p netip.Prefix, gw, a netip.Addr) bool {
	if a == p.Masked().Addr() || a == gw {
		return true
	}
	return a.Is4() && p.Bits() < 31 && a == model.BroadcastAddr(p)
}

// Allocate leases one address per subnet of n to owner. A requested address
// is used for the subnet that contains it; every requested address must fall
// in one of n's subnets. Errors name the "ip" field.
func Allocate(tx *store.Tx, n *model.Network, owner string, requested []netip.Addr) ([]netip.Addr, error) {
	want := make([]netip.Addr, len(n.Subnets))
	for _, r := range requested {
		idx := -1
		for i, p := range n.Subnets {
			if p.Contains(r) {
				idx = i
			}
		}
		switch {
		case idx < 0:
			return nil, model.Fieldf("ips", "%q: not in any subnet of network %q (%v)", r, n.Name, n.Subnets)
		case want[idx].IsValid():
			return nil, model.Fieldf("ips", "%q: network %q already got an address from subnet %s", r, n.Name, n.Subnets[idx])
		case Reserved(n.Subnets[idx], n.Gateways[idx], r):
			return nil, model.Fieldf("ips", "%q: reserved in subnet %s (subnet, gateway or broadcast address)", r, n.Subnets[idx])
		}
		if o := tx.LeaseOwner(n.Name, r); o != "" {
			return nil, model.Conflictf("ip %q: already leased to endpoint %s", r, o)
		}
		want[idx] = r
	}
	for i, p := range n.Subnets {
		if !want[i].IsValid() {
			a, err := next(tx, n, p, n.Gateways[i])
			if err != nil {
				return nil, err
			}
			want[i] = a
		}
		if err := tx.PutLease(n.Name, want[i], owner); err != nil {
			return nil, err
		}
	}
	return want, nil
}

func next(tx *store.Tx, n *model.Network, p netip.Prefix, gw netip.Addr) (netip.Addr, error) {
	a := p.Masked().Addr()
	for i := 0; i < maxScan; i++ {
		a = a.Next()
		if !a.IsValid() || !p.Contains(a) {
			break
		}
		if Reserved(p, gw, a) || tx.LeaseOwner(n.Name, a) != "" {
			continue
		}
		return a, nil
	}
	return netip.Addr{}, model.Conflictf("subnet %s of network %q: no free address", p, n.Name)
}

// Release returns addrs of network to the pool.
func Release(tx *store.Tx, network string, addrs []netip.Addr) error {
	for _, a := range addrs {
		if err := tx.DeleteLease(network, a); err != nil {
			return err
		}
	}
	return nil
}

// Exhausted returns, for the first subnet of n with no address left to
// lease, the error Allocate would fail with; nil while every subnet has one.
func Exhausted(tx *store.Tx, n *model.Network) error {
	for i, p := range n.Subnets {
		if _, err := next(tx, n, p, n.Gateways[i]); err != nil {
			return err
		}
	}
	return nil
}
