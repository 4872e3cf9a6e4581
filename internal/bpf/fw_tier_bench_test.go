package bpf_test

import (
	"fmt"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// tierSet is a rule set shaped as Kubernetes mode compiles
// ClusterNetworkPolicies around NetworkPolicies (docs/kubernetes.md): n
// rules, half in the Admin tier (priorities 10000+, a Deny of one TCP
// port from a pod's /32 to the endpoint, every tenth a Pass of a /24 to
// the NetworkPolicy tier), a NetworkPolicy allowance and isolation
// (50000, 50001) of another endpoint, half in the Baseline tier
// (60000+), and last a Baseline Deny of everything to the endpoint. The
// benchmark's packet (10.9.0.1 -> 10.1.0.2:8080) matches none but the
// passes of 10.9.0.0/24 and the last rule: its search meets one pass and
// goes on to the end.
func tierSet(n int) *firewall.RuleSet {
	f := false
	rs := &firewall.RuleSet{Established: &f}
	for i := range n - 1 {
		r := firewall.Rule{Name: fmt.Sprintf("cnp%d", i), Direction: "to-endpoint", Dst: firewall.List{"10.1.0.2"},
			Proto: firewall.List{"tcp"}, DstPort: firewall.List{fmt.Sprint(1 + i%8000)}, Action: "drop",
			Src: firewall.List{fmt.Sprintf("10.%d.%d.%d/32", 100+i>>16&63, i>>8&255, i&255)}}
		if i < n/2 {
			r.Priority = 10000 + i
			if i%10 == 0 {
				r.Action, r.PassTo, r.DstPort, r.Src = "pass", 49999, nil, firewall.List{"10.9.0.0/24"}
			}
		} else {
			r.Priority = 60000 + i
		}
		rs.Rules = append(rs.Rules, r)
	}
	rs.Rules = append(rs.Rules,
		firewall.Rule{Name: "np.in0", Priority: 50000, Direction: "to-endpoint", Dst: firewall.List{"10.1.0.3"}, Src: firewall.List{"10.9.0.0/24"}, Action: "allow"},
		firewall.Rule{Name: "np.in-deny", Priority: 50001, Direction: "to-endpoint", Dst: firewall.List{"10.1.0.3"}, Action: "drop"},
		firewall.Rule{Name: "baseline-deny", Priority: 99998, Direction: "to-endpoint", Dst: firewall.List{"10.1.0.2"}, Action: "drop"})
	return rs
}

// BenchmarkFirewallTiers: the to-endpoint program (tcx egress of a host
// veth) deciding a new TCP flow against tiered sets of 1 to 10,000 rules
// (tierSet), in interleaved rounds of one run each, medians reported as
// ns/packet per size: the cost stays flat in the number of rules.
//
//	go test -run '^$' -bench FirewallTiers -benchtime 1x ./internal/bpf
func BenchmarkFirewallTiers(b *testing.B) {
	sizes := []int{1, 100, 1000, 10000}
	const repeat, rounds = 20000, 15
	frame, err := fwtest.Frame(firewall.Packet{Src: netip.MustParseAddr("10.9.0.1"), Dst: netip.MustParseAddr("10.1.0.2"),
		Proto: 6, SPort: 40000, DPort: 8080, Flags: 0x02})
	if err != nil {
		b.Fatal(err)
	}
	hs := make([]*fwHarness, len(sizes))
	for i, n := range sizes {
		hs[i] = newFwHarness(b)
		pol := hs[i].install(b, tierSet(n), false)
		want, _ := pol.Evaluate(firewall.Packet{Kind: firewall.KindToEP, Net: 1, Src: netip.MustParseAddr("10.9.0.1"),
			Dst: netip.MustParseAddr("10.1.0.2"), Proto: 6, SPort: 40000, DPort: 8080, Flags: 0x02})
		if want < 0 || pol.Rules[want].Name != "baseline-deny" {
			b.Fatalf("%d rules: the model decides %d, want baseline-deny", n, want)
		}
		if refused, _, err := hs[i].run(firewall.KindToEP, frame); err != nil || !refused {
			b.Fatalf("%d rules: refused %v, %v: want the baseline's drop", n, refused, err)
		}
	}
	ns := make([][]float64, len(sizes))
	for range rounds {
		for i := range sizes {
			var d time.Duration
			err := hs[i].do(func() error {
				ret, dk, err := hs[i].objs.ToEndpoint().Benchmark(frame, repeat, nil)
				if err == nil && ret != tcShot {
					err = fmt.Errorf("return value %d, want TC_ACT_SHOT", ret)
				}
				d = dk
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			ns[i] = append(ns[i], float64(d.Nanoseconds()))
		}
	}
	for i, n := range sizes {
		sort.Float64s(ns[i])
		med := ns[i][len(ns[i])/2]
		b.ReportMetric(med, fmt.Sprintf("ns/pkt-%drules", n))
		b.Logf("%6d rules: median %.1f ns/packet (min %.1f, max %.1f, %d rounds of %d)", n, med, ns[i][0], ns[i][len(ns[i])-1], rounds, repeat)
	}
}
