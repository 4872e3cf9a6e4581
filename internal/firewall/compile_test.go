package firewall_test

import (
	"math/rand/v2"
	"slices"
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
	matchesReference(t, fwtest.RandomRuleSet, 0, sizes, packets)
}

// matchesReference compiles a set of every size from gen and checks
// random packets against the reference model: the same deciding rule
// and the same log rules, every time.
func matchesReference(t *testing.T, gen func(*rand.Rand, int) *firewall.RuleSet, seed0 uint64, sizes []int, packets int) {
	for seed, n := range sizes {
		rng := rand.New(rand.NewPCG(uint64(seed)+seed0, uint64(n)))
		rs := gen(rng, n)
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

// TestCompileTuple4 checks the uplink's IPv4 tuple hash (compileTuple4,
// run by ClassifyTuple4 as bpf/lib/fw_lin.h runs it) against the
// reference model on random tuple sets, and that a set one rule beyond
// the shape gets no tuples (the bitmaps decide it).
func TestCompileTuple4(t *testing.T) {
	sets, packets := 200, 2000
	if testing.Short() {
		sets, packets = 60, 500
	}
	tuples := 0
	for seed := range sets {
		rng := rand.New(rand.NewPCG(uint64(seed), 44))
		n := bpf.FwLinMax + 1 + rng.IntN(60)
		if seed%10 == 0 {
			n = 1 + rng.IntN(3) // small: the list's
		}
		rs := fwtest.RandomTupleSet(rng, n)
		pol, err := firewall.Validate(rs, fwtest.Resolver())
		if err != nil {
			t.Fatalf("seed %d: validate: %v", seed, err)
		}
		tab, err := firewall.Compile(pol, slotsFor(pol))
		if err != nil {
			t.Fatalf("seed %d: compile: %v", seed, err)
		}
		if tab.Gen.Lin != 0 {
			if tab.Gen.Tuple4 != 0 {
				t.Fatalf("seed %d: both the list and the tuples", seed)
			}
			continue
		}
		if tab.Gen.Tuple4 == 0 {
			// Only a set without any IPv4 uplink rule has none.
			for _, r := range pol.Rules {
				for _, m := range r.Matches {
					up := slices.ContainsFunc(m.Ctx, func(c firewall.Ctx) bool { return c.Kind == firewall.KindUplink })
					if up && m.V4 && !r.Default && len(m.Src4) > 0 {
						t.Fatalf("seed %d: a tuple set without tuples (rule %s)", seed, r.Name)
					}
				}
			}
			continue
		}
		tuples++
		for range packets {
			pk := fwtest.RandomTuplePacket(rng)
			if !pk.Src.Is4() {
				continue
			}
			want, _ := pol.Evaluate(pk)
			got := -1
			if bit := tab.ClassifyTuple4(pk); bit >= 0 {
				got = tab.Bit[bit]
			}
			if got != want {
				t.Fatalf("seed %d, %d rules, packet %+v: tuples decide rule %s, reference %s",
					seed, n, pk, name(pol, got), name(pol, want))
			}
		}
		// One rule beyond the shape: no tuples.
		for _, mut := range []func(*firewall.Rule){
			func(r *firewall.Rule) { r.Src = firewall.List{"203.0.113.0/24"} },
			func(r *firewall.Rule) { r.SrcPort = firewall.List{"1000"} },
			func(r *firewall.Rule) { r.Dst = firewall.List{"192.0.2.1"} },
			func(r *firewall.Rule) { r.DstPort = firewall.List{"80-81"} },
			func(r *firewall.Rule) { r.Proto, r.DstPort = nil, nil },
			func(r *firewall.Rule) { r.Action, r.Log = "drop", 10 },
			func(r *firewall.Rule) { r.TCPFlags = "syn" },
		} {
			rs2 := *rs
			rs2.Rules = append([]firewall.Rule{{Name: "odd", Scope: "uplink", Action: "drop", Proto: firewall.List{"tcp"},
				Src: firewall.List{"203.0.113.1"}, DstPort: firewall.List{"80"}}}, rs.Rules...)
			mut(&rs2.Rules[0])
			pol2, err := firewall.Validate(&rs2, fwtest.Resolver())
			if err != nil {
				t.Fatalf("seed %d: validate the odd rule: %v", seed, err)
			}
			tab2, err := firewall.Compile(pol2, slotsFor(pol2))
			if err != nil {
				t.Fatal(err)
			}
			if tab2.Gen.Tuple4 != 0 {
				t.Fatalf("seed %d: odd rule %+v: the set still has tuples", seed, rs2.Rules[0])
			}
		}
	}
	if tuples < sets/2 {
		t.Fatalf("%d of %d sets had tuples", tuples, sets)
	}
	t.Logf("%d of %d sets on the tuples", tuples, sets)
}
