package bgp

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

func svc(name, vip string, weights ...uint32) model.Service {
	s := model.Service{Name: name, VIP: netip.MustParseAddrPort(vip), Proto: "tcp"}
	for i, w := range weights {
		s.Backends = append(s.Backends, model.Backend{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 80), Weight: w})
	}
	return s
}

func prefixes(as []Announcement) string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%s(%s)", a.Prefix, a.Why))
	}
	return strings.Join(out, " ")
}

// TestDesired: what the speaker announces, and when a VIP is withdrawn.
func TestDesired(t *testing.T) {
	pools := []model.LBPool{{Name: "pub", CIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/28"), netip.MustParsePrefix("2001:db8::/120")},
		Communities: []string{"65001:7", "no-export"}, MED: 5}}
	self := model.Node{Name: "n1", Self: true, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}
	other := model.Node{Name: "n2", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}}
	nets := []model.Network{{Name: "blue", Subnets: []netip.Prefix{netip.MustParsePrefix("10.10.0.0/24")}},
		{Name: "xlcal-tc", Subnets: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}}}
	all := Advertise{PodCIDRs: true, LoadBalancer: true, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}
	for _, c := range []struct {
		name string
		adv  Advertise
		st   State
		want string
	}{
		{"clustered: this node's pod CIDRs, not the peers'", Advertise{PodCIDRs: true},
			State{Nodes: []model.Node{other, self}, Networks: nets}, "10.244.1.0/24(pod-cidr)"},
		{"alone: the networks' subnets, not the calibration's hidden ones", Advertise{PodCIDRs: true},
			State{Networks: nets}, "10.10.0.0/24(network blue)"},
		{"a VIP in a pool with a backend; one outside a pool never", all,
			State{Pools: pools, Services: []model.Service{svc("a", "198.51.100.1:80", 1), svc("b", "192.0.2.1:80", 1), svc("c", "[2001:db8::5]:443", 0, 1)}},
			"10.96.0.0/12(service-cidr) 198.51.100.1/32(service a (pool pub)) 2001:db8::5/128(service c (pool pub))"},
		{"no backend taking new flows (none, or all drained: externalTrafficPolicy Local without a local endpoint): withdrawn", Advertise{LoadBalancer: true},
			State{Pools: pools, Services: []model.Service{svc("a", "198.51.100.1:80"), svc("b", "198.51.100.2:80", 0, 0)}}, ""},
		{"two ports of one VIP: announced once", Advertise{LoadBalancer: true},
			State{Pools: pools, Services: []model.Service{svc("a80", "198.51.100.1:80", 1), svc("a443", "198.51.100.1:443", 1)}}, "198.51.100.1/32(service a80 (pool pub))"},
		{"switched off", Advertise{},
			State{Nodes: []model.Node{self}, Pools: pools, Services: []model.Service{svc("a", "198.51.100.1:80", 1)}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Desired(c.adv, c.st)
			if p := prefixes(got); p != c.want {
				t.Errorf("got  %s\nwant %s", p, c.want)
			}
			for _, a := range got {
				if strings.HasPrefix(a.Why, "service ") && (a.MED != 5 || len(a.Communities) != 2 || a.Communities[1] != 0xFFFFFF01) {
					t.Errorf("%s: MED %d communities %v, want the pool's (5; 65001:7 no-export)", a.Prefix, a.MED, communityStrings(a.Communities))
				}
			}
		})
	}
}
