package firewall_test

import (
	"math/rand/v2"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// slotsFor gives every rule of pol a counter slot, in order.
func slotsFor(pol *firewall.Policy) map[string]uint32 {
	s := map[string]uint32{}
	for i, r := range pol.Rules {
		s[r.Name] = uint32(i)
	}
	return s
}

// TestCompileMatchesReference checks the compiled tables (run the way
// bpf/lib/fw.h runs them) against the reference model on random rule sets
// and packets: the same deciding rule and the same log rules, every time.
func TestCompileMatchesReference(t *testing.T) {
	sizes := []int{0, 1, 2, 5, 20, 100, 500, 2000}
	packets := 3000
	if testing.Short() {
		sizes, packets = []int{1, 5, 50}, 300
	}
	for seed, n := range sizes {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
		rs := fwtest.RandomRuleSet(rng, n)
		pol, err := firewall.Validate(rs, fwtest.Resolver())
		if err != nil {
			t.Fatalf("%d rules: validate: %v", n, err)
		}
		tab, err := firewall.Compile(pol, slotsFor(pol))
		if err != nil {
			t.Fatalf("%d rules: compile: %v", n, err)
		}
		for i := 0; i < packets; i++ {
			k := []firewall.Kind{firewall.KindFromEP, firewall.KindToEP, firewall.KindUplink}[rng.IntN(3)]
			pk := fwtest.RandomPacket(rng, k)
			want, wantLog := pol.Evaluate(pk)
			bit, logBits := tab.Classify(pk)
			got := -1
			if bit >= 0 {
				got = tab.Bit[bit]
			}
			var gotLog []int
			for _, b := range logBits {
				gotLog = append(gotLog, tab.Bit[b])
			}
			if got != want || !equalInts(gotLog, wantLog) {
				t.Fatalf("%d rules, packet %+v: tables decide rule %d (logs %v), reference %d (logs %v)\nrule set: %+v",
					n, pk, got, gotLog, want, wantLog, name(pol, want))
			}
		}
		t.Logf("%d rules: %d bits, %d classes, %d prefixes, %d exact keys, fields %#x",
			n, len(tab.Rules), len(tab.Pool), len(tab.Addr), len(tab.Exact), tab.Gen.Fields)
	}
}

func name(pol *firewall.Policy, i int) string {
	if i < 0 {
		return "(none)"
	}
	return pol.Rules[i].Name
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var _ = bpf.FwAllow
