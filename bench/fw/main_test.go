package main

import (
	"strings"
	"testing"
)

func TestParseFWFlags(t *testing.T) {
	o, err := parseFWFlags([]string{"-quick"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Reps != 1 || o.Duration.Seconds() != 1 || len(o.levels) != 3 || len(o.variants) != len(fwVariants) || !o.iperf {
		t.Fatalf("-quick: %+v", o)
	}
	for _, bad := range [][]string{{"-levels", "0"}, {"-variants", "pf"}, {"-variants", "iptables,iptables"}, {"-reps", "0"}} {
		if _, err := parseFWFlags(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// The same rule numbering everywhere: rule i's source never is the
// generator's, and sources are distinct.
func TestFWRuleSrc(t *testing.T) {
	seen := map[string]bool{}
	for i := 1; i < 16000; i++ {
		a := fwRuleSrc(i)
		if a == fwGenAddr || seen[a.String()] {
			t.Fatalf("rule %d: source %s repeats or is the generator's", i, a)
		}
		seen[a.String()] = true
	}
}

func TestFWMarkdownRatios(t *testing.T) {
	o := fwOptions{levels: []int{1, 10000}, variants: fwVariants}
	o.Reps = 1
	rep := &fwReport{Versions: map[string]string{}}
	for _, s := range []fwSample{
		{Variant: "xlane-native", Rules: 1, DroppedMpps: 4, ProgNsPerPkt: 150, Offered: 100, RingFull: 40},
		{Variant: "xlane-native", Rules: 10000, DroppedMpps: 4},
		{Variant: "xdp-drop", Rules: 1, DroppedMpps: 8, ProgNsPerPkt: 20}, {Variant: "xdp-drop", Rules: 10000, DroppedMpps: 8},
		{Variant: "xlane-generic", Rules: 1, DroppedMpps: 2}, {Variant: "xlane-generic", Rules: 10000, DroppedMpps: 2},
		{Variant: "iptables", Rules: 1, DroppedMpps: 1}, {Variant: "iptables", Rules: 10000, DroppedMpps: 0.01},
		{Variant: "nftables", Rules: 1, DroppedMpps: 2}, {Variant: "nftables", Rules: 10000, DroppedMpps: 0.02},
	} {
		rep.Samples = append(rep.Samples, s)
	}
	md := fwMarkdown(rep, o)
	for _, want := range []string{
		"| 1 | xlane-native | 4.000 |", "| 4.00× | 2.00× | 0.50× | 40 % | 150 |", // vs iptables, nftables, the bare drop; ring full; program
		"| 1 | xdp-drop | 8.000 |", "| 8.00× | 4.00× | 1 | 0 % | 20 |", "| 1 | nftables | 2.000 | 0.000 | 0 % | 0 | 2.00× | 1 | 0.25× | 0 % | – |",
		"| 10000 | xlane-native | 4.000 |", "| 400.00× | 200.00× |",
		"xlane-native 1.00", "iptables 0.01",
		"| xlane-native | 1 | 0.50 met | 4.00 met | 2.00 **missed** |",
		"| xlane-native | 10000 | 0.50 met | 400.00 met | 200.00 met |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
