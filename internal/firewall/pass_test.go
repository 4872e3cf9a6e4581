package firewall_test

import (
	"net/netip"
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
	f := false
	rs := &firewall.RuleSet{Established: &f, Rules: []firewall.Rule{
		// admin tier (priority < 100)
		{Name: "admin-pass-web", Priority: 10, Action: "pass", PassTo: 100, Proto: firewall.List{"tcp"}, DstPort: firewall.List{"80"}},
		{Name: "admin-deny-10", Priority: 20, Action: "drop", Src: firewall.List{"10.0.0.0/8"}},
		// the middle tier (NetworkPolicy)
		{Name: "np-allow-22", Priority: 100, Action: "allow", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"22"}},
		{Name: "np-deny-443", Priority: 101, Action: "drop", Proto: firewall.List{"tcp"}, DstPort: firewall.List{"443"}},
		// baseline (priority >= 200)
		{Name: "base-pass-80", Priority: 200, Action: "pass", PassTo: 300, Proto: firewall.List{"tcp"}, DstPort: firewall.List{"80"}, Src: firewall.List{"10.1.0.0/16"}},
		{Name: "base-deny", Priority: 210, Action: "drop"},
	}}
	pol, err := firewall.Validate(rs, fwtest.Resolver())
	if err != nil {
		t.Fatal(err)
	}
	tab, err := firewall.Compile(pol, slotsFor(pol))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src   string
		dport uint32
		want  string // deciding rule, "" for none (allowed)
	}{
		{"10.1.2.3", 80, ""},               // admin pass, baseline pass: nothing decides
		{"10.2.2.3", 80, "base-deny"},      // admin pass skips admin-deny-10; baseline denies
		{"10.2.2.3", 22, "admin-deny-10"},  // no pass: the admin tier decides
		{"192.0.2.1", 22, "np-allow-22"},   // the middle tier decides
		{"192.0.2.1", 443, "np-deny-443"},  //
		{"192.0.2.1", 8080, "base-deny"},   // nothing above: baseline
		{"10.1.2.3", 443, "admin-deny-10"}, // the pass is for port 80 only
		{"192.0.2.1", 80, "base-deny"},     // admin pass, baseline's pass is for 10.1/16 only
	} {
		pk := firewall.Packet{Kind: firewall.KindFromEP, Net: 1, Src: netip.MustParseAddr(tc.src),
			Dst: netip.MustParseAddr("192.0.2.99"), Proto: 6, SPort: 40000, DPort: tc.dport}
		want, _ := pol.Evaluate(pk)
		got := ""
		if want >= 0 {
			got = pol.Rules[want].Name
		}
		if got != tc.want {
			t.Errorf("%s -> :%d: reference decides %q, want %q", tc.src, tc.dport, got, tc.want)
		}
		bit, _ := tab.Classify(pk)
		tabGot := ""
		if bit >= 0 {
			tabGot = pol.Rules[tab.Bit[bit]].Name
		}
		if tabGot != tc.want {
			t.Errorf("%s -> :%d: tables decide %q, want %q", tc.src, tc.dport, tabGot, tc.want)
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
