package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
)

// Announcement is one prefix the speaker announces, with its attributes.
type Announcement struct {
	Prefix netip.Prefix
	// Why says where it comes from: "pod-cidr", "network NAME",
	// "service NAME (pool POOL)", "service-cidr".
	Why         string
	Communities []uint32
	MED         uint32
}

// equal reports whether a and b announce the same attributes.
func (a Announcement) equal(b Announcement) bool {
	return a.Prefix == b.Prefix && a.MED == b.MED && slices.Equal(a.Communities, b.Communities)
}

// State is what the announcements are computed from: the store's view.
type State struct {
	Nodes    []model.Node
	Networks []model.Network
	Services []model.Service
	Pools    []model.LBPool
}

// Desired computes the announcements of st under what cfg switches on:
//
//   - pod CIDRs (Advertise.PodCIDRs): this node's pod CIDRs (the node
//     record marked Self, with --node-name), else the subnets of this
//     node's networks;
//   - LoadBalancer addresses (Advertise.LoadBalancer): each service VIP
//     inside an LB pool, as a host route (/32, /128), only while the
//     service has a backend taking new flows (weight > 0): a service with
//     externalTrafficPolicy Local has only this node's endpoints as
//     backends in Kubernetes mode, so a node without a ready local
//     endpoint withdraws it, and any service that loses its last
//     endpoint is withdrawn everywhere;
//   - the service CIDRs given (Advertise.ServiceCIDRs), as they are.
//
// The result is sorted by prefix; a prefix two sources give is announced
// once, by the first.
func Desired(adv Advertise, st State) []Announcement {
	var out []Announcement
	seen := map[netip.Prefix]bool{}
	add := func(a Announcement) {
		if a.Prefix.IsValid() && !seen[a.Prefix] {
			seen[a.Prefix] = true
			out = append(out, a)
		}
	}
	if adv.PodCIDRs {
		self := slices.IndexFunc(st.Nodes, func(n model.Node) bool { return n.Self })
		if self >= 0 && len(st.Nodes[self].PodCIDRs) > 0 {
			for _, p := range st.Nodes[self].PodCIDRs {
				add(Announcement{Prefix: p.Masked(), Why: "pod-cidr", Communities: adv.PodCommunities})
			}
		} else {
			for _, n := range st.Networks {
				if core.Hidden(n.Name) {
					continue
				}
				for _, p := range n.Subnets {
					add(Announcement{Prefix: p.Masked(), Why: "network " + n.Name, Communities: adv.PodCommunities})
				}
			}
		}
	}
	if adv.LoadBalancer {
		for _, s := range st.Services {
			a := s.VIP.Addr().Unmap()
			i := slices.IndexFunc(st.Pools, func(p model.LBPool) bool { return p.Contains(a) })
			if i < 0 || !serving(&s) {
				continue
			}
			pool := &st.Pools[i]
			comms := make([]uint32, 0, len(pool.Communities))
			for _, c := range pool.Communities {
				if v, err := model.ParseCommunity(c); err == nil {
					comms = append(comms, v)
				}
			}
			add(Announcement{Prefix: netip.PrefixFrom(a, a.BitLen()), Why: fmt.Sprintf("service %s (pool %s)", s.Name, pool.Name),
				Communities: comms, MED: pool.MED})
		}
	}
	for _, p := range adv.ServiceCIDRs {
		add(Announcement{Prefix: p.Masked(), Why: "service-cidr"})
	}
	slices.SortFunc(out, func(a, b Announcement) int {
		return cmp.Or(a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
	})
	return out
}

// serving reports whether a service has a backend that takes new flows.
func serving(s *model.Service) bool {
	return slices.ContainsFunc(s.Backends, func(b model.Backend) bool { return b.Weight > 0 })
}

// communityString is the AS:VALUE form (or the well-known name).
func communityString(c uint32) string {
	switch c {
	case 0xFFFFFF01:
		return "no-export"
	case 0xFFFFFF02:
		return "no-advertise"
	case 0xFFFFFF03:
		return "no-export-subconfed"
	case 0xFFFF029A:
		return "blackhole"
	}
	return fmt.Sprintf("%d:%d", c>>16, c&0xFFFF)
}

func communityStrings(cs []uint32) []string {
	var out []string
	for _, c := range cs {
		out = append(out, communityString(c))
	}
	return out
}

// ParseCommunities reads a list of communities (model.ParseCommunity);
// the error names field.
func ParseCommunities(field string, ss []string) ([]uint32, error) {
	var out []uint32
	for _, s := range ss {
		v, err := model.ParseCommunity(strings.TrimSpace(s))
		if err != nil {
			return nil, model.Fieldf(field, "%q: %s", s, err)
		}
		out = append(out, v)
	}
	return out, nil
}
