package firewall_test

import (
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// TestPassTiers: a pass rule skips the rules of its tier (priority below
// its pass_to) and the next tier decides; the reference model and the
// compiled tables agree with the table.
func TestPassTiers(t *testing.T) {
	rs, cases := fwtest.PassTiers()
	pol, err := firewall.Validate(rs, fwtest.Resolver())
	if err != nil {
		t.Fatal(err)
	}
	tab, err := firewall.Compile(pol, slotsFor(pol))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		pk := tc.Packet(firewall.KindToEP)
		want, _ := pol.Evaluate(pk)
		got := ""
		if want >= 0 {
			got = pol.Rules[want].Name
		}
		if got != tc.Want {
			t.Errorf("%s -> :%d: reference decides %q, want %q", tc.Src, tc.DPort, got, tc.Want)
		}
		bit, _ := tab.Classify(pk)
		tabGot := ""
		if bit >= 0 {
			tabGot = pol.Rules[tab.Bit[bit]].Name
		}
		if tabGot != tc.Want {
			t.Errorf("%s -> :%d: tables decide %q, want %q", tc.Src, tc.DPort, tabGot, tc.Want)
		}
	}
	// The pass rules' bits carry their targets: the first bit of the
	// next tier (np-allow-22) and past the baseline (the end).
	for bit, r := range tab.Rules {
		if r.Action != bpf.FwPass {
			continue
		}
		target := int(r.Sample)
		name := pol.Rules[tab.Bit[bit]].Name
		switch name {
		case "admin-pass-web":
			if pol.Rules[tab.Bit[target]].Name != "np-allow-22" {
				t.Errorf("%s goes on at %s", name, pol.Rules[tab.Bit[target]].Name)
			}
		case "base-pass-80":
			if target != len(tab.Rules) {
				t.Errorf("%s goes on at bit %d, want %d (past every rule)", name, target, len(tab.Rules))
			}
		}
	}
}

// TestPassMatchesReference: random tiered sets with pass rules, the
// compiled tables against the reference model.
func TestPassMatchesReference(t *testing.T) {
	sizes := []int{1, 5, 20, 100, 500, 2000}
	packets := 3000
	if testing.Short() {
		sizes, packets = []int{5, 50}, 300
	}
	matchesReference(t, fwtest.RandomTieredRuleSet, 7, sizes, packets)
}

// TestPassValidate: the errors of pass rules name the field.
func TestPassValidate(t *testing.T) {
	for _, tc := range []struct {
		rules []firewall.Rule
		want  string
	}{
		{[]firewall.Rule{{Name: "p", Priority: 10, Action: "pass"}}, "rules[p].pass_to 0: a pass rule goes on at a later priority than its own (10)"},
		{[]firewall.Rule{{Name: "p", Priority: 10, Action: "pass", PassTo: 10}}, "rules[p].pass_to 10:"},
		{[]firewall.Rule{{Name: "p", Priority: 10, Action: "pass", PassTo: 2000000}}, "rules[p].pass_to 2000000: want at most 1000001"},
		{[]firewall.Rule{{Name: "p", Priority: 10, Action: "pass", PassTo: 20, Log: 1}}, "rules[p].log 1: a pass rule decides nothing"},
		{[]firewall.Rule{{Name: "a", Action: "allow", PassTo: 20}}, "rules[a].pass_to 20: only for action pass"},
		{[]firewall.Rule{{Name: "a", Action: "jump"}}, `rules[a].action "jump": want allow, drop, reject, log or pass`},
	} {
		_, err := firewall.Validate(&firewall.RuleSet{Rules: tc.rules}, fwtest.Resolver())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.rules, err, tc.want)
		}
	}
	var many []firewall.Rule
	for i := range bpf.FwMaxPassTo + 1 {
		many = append(many, firewall.Rule{Name: "p" + string(rune('a'+i)), Priority: 1, Action: "pass", PassTo: 10 + i})
	}
	_, err := firewall.Validate(&firewall.RuleSet{Rules: many}, fwtest.Resolver())
	if err == nil || !strings.Contains(err.Error(), "pass_to 18: the set's pass rules have 9 targets, at most 8") {
		t.Errorf("9 pass targets: got %v", err)
	}
	// A default policy cannot pass.
	_, err = firewall.Validate(&firewall.RuleSet{Defaults: []firewall.Default{{Action: "pass"}}}, fwtest.Resolver())
	if err == nil || !strings.Contains(err.Error(), "defaults[0].action") {
		t.Errorf("default pass: got %v", err)
	}
}
