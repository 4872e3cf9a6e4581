package lbipam

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/xlane-dev/xlane/internal/model"
)

// Class is the loadBalancerClass xlane serves; a Service with no class
// is served too, one with another class is left to its controller.
const Class = "xlane.dev/lb"

// Annotations a Service may carry.
const (
	// AnnotationIPs asks for specific addresses (comma-separated, one per
	// family), like spec.loadBalancerIP (deprecated by Kubernetes), which
	// is read too.
	AnnotationIPs = "xlane.dev/load-balancer-ips"
	// AnnotationPool restricts the allocation to one pool.
	AnnotationPool = "xlane.dev/lb-pool"
)

// ConditionType is the Service status condition the allocator sets: True
// with the addresses, False saying why not (reason PoolExhausted,
// RequestedUnavailable, NoPool).
const ConditionType = "xlane.dev/LoadBalancerIPAllocated"

// Result is the allocator's verdict on one Service.
type Result struct {
	// Key is namespace/name.
	Key string
	// IPs are the Service's addresses, in its ipFamilies' order.
	IPs []netip.Addr
	// Reason and Message say why an address is missing ("" when none is).
	Reason, Message string
}

// Managed reports whether the allocator serves svc: type LoadBalancer,
// no loadBalancerClass or Class.
func Managed(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		(svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass == Class)
}

// Assign computes the addresses of every managed Service of svcs from
// pools: a Service keeps the pool addresses its status has (when still
// wanted), gets the addresses it asks for (AnnotationIPs,
// spec.loadBalancerIP) if they are in a pool and free, else the first free
// address of its family (of AnnotationPool's pool, or of any), one per
// family of spec.ipFamilies (IPv4 when none). An address is never given
// twice: every Service's status addresses (managed or not) count as used,
// and older Services (by creation, then name) are served first, so a
// restart or a second allocator computes the same answer.
func Assign(pools []model.LBPool, svcs []*corev1.Service) []Result {
	svcs = slices.Clone(svcs)
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	used := map[netip.Addr]string{}
	// Unmanaged Services' addresses first: they are not ours to move.
	for _, s := range svcs {
		if !Managed(s) {
			for _, a := range statusIPs(s) {
				used[a] = key(s)
			}
		}
	}
	// Then what managed Services hold, oldest first (a duplicate, which
	// only another writer can have made, stays with the older).
	keep := map[string][]netip.Addr{}
	for _, s := range svcs {
		if !Managed(s) {
			continue
		}
		req := requested(s)
		for _, a := range statusIPs(s) {
			if _, taken := used[a]; taken || poolOf(pools, a) == nil {
				continue
			}
			if len(req) > 0 && !slices.Contains(req, a) {
				continue // no longer asked for
			}
			if p := s.Annotations[AnnotationPool]; p != "" && poolOf(pools, a).Name != p {
				continue
			}
			used[a] = key(s)
			keep[key(s)] = append(keep[key(s)], a)
		}
	}
	var out []Result
	for _, s := range svcs {
		if !Managed(s) {
			continue
		}
		r := Result{Key: key(s)}
		have := keep[r.Key]
		req := requested(s)
		for _, fam := range families(s) {
			i := slices.IndexFunc(have, func(a netip.Addr) bool { return is4(a) == (fam == corev1.IPv4Protocol) })
			if i >= 0 {
				r.IPs = append(r.IPs, have[i])
				continue
			}
			var a netip.Addr
			var why, msg string
			if j := slices.IndexFunc(req, func(a netip.Addr) bool { return is4(a) == (fam == corev1.IPv4Protocol) }); j >= 0 {
				a = req[j]
				switch owner, taken := used[a]; {
				case poolOf(pools, a) == nil:
					why, msg = "RequestedUnavailable", fmt.Sprintf("%s is in no LoadBalancer pool", a)
				case taken:
					why, msg = "RequestedUnavailable", fmt.Sprintf("%s is %s's", a, owner)
				}
			} else {
				a, why, msg = free(pools, used, fam, s.Annotations[AnnotationPool])
			}
			if why != "" {
				r.Reason, r.Message = why, msg
				continue
			}
			used[a] = r.Key
			r.IPs = append(r.IPs, a)
		}
		out = append(out, r)
	}
	return out
}

// free is the first address of family fam no one uses, in pool (or any
// pool); the reason and message say why there is none.
func free(pools []model.LBPool, used map[netip.Addr]string, fam corev1.IPFamily, pool string) (netip.Addr, string, string) {
	v4 := fam == corev1.IPv4Protocol
	found := false
	for _, p := range pools {
		if pool != "" && p.Name != pool {
			continue
		}
		for _, c := range p.CIDRs {
			if c.Addr().Is4() != v4 {
				continue
			}
			found = true
			first, last := c.Masked().Addr(), lastAddr(c)
			if v4 && c.Bits() < 31 {
				first, last = first.Next(), last.Prev() // not the network's nor the broadcast address
			}
			for a := first; a.IsValid() && a.Compare(last) <= 0; a = a.Next() {
				if _, taken := used[a]; !taken {
					return a, "", ""
				}
			}
		}
	}
	switch {
	case pool != "" && !slices.ContainsFunc(pools, func(p model.LBPool) bool { return p.Name == pool }):
		return netip.Addr{}, "NoPool", fmt.Sprintf("no LoadBalancer pool %q (annotation %s)", pool, AnnotationPool)
	case !found:
		return netip.Addr{}, "NoPool", fmt.Sprintf("no LoadBalancer pool has %s addresses", fam)
	}
	return netip.Addr{}, "PoolExhausted", fmt.Sprintf("every %s address of the pools is taken", fam)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func poolOf(pools []model.LBPool, a netip.Addr) *model.LBPool {
	for i := range pools {
		if pools[i].Contains(a) {
			return &pools[i]
		}
	}
	return nil
}

func key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

func is4(a netip.Addr) bool { return a.Unmap().Is4() }

// families are the Service's IP families, IPv4 when it names none.
func families(s *corev1.Service) []corev1.IPFamily {
	if len(s.Spec.IPFamilies) == 0 {
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return s.Spec.IPFamilies
}

// statusIPs are the addresses of the Service's status.loadBalancer.
func statusIPs(s *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range s.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// requested are the addresses the Service asks for (AnnotationIPs, else
// spec.loadBalancerIP); unreadable ones are ignored.
func requested(s *corev1.Service) []netip.Addr {
	raw := s.Annotations[AnnotationIPs]
	if raw == "" {
		raw = s.Spec.LoadBalancerIP
	}
	var out []netip.Addr
	for _, f := range strings.Split(raw, ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(f)); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}
