package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseFWFlags(t *testing.T) {
	o, err := parseFWFlags([]string{"-quick"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Reps != 1 || o.Duration.Seconds() != 1 || len(o.levels) != 3 || len(o.variants) != len(fwVariants) || !o.iperf ||
		len(o.gens) != 1 || o.gens[0] != (fwGen{batch: 256, backfill: true, anchor: true}) || !slices.Equal(o.flows, []int{1, 256, 4096}) {
		t.Fatalf("-quick: %+v", o)
	}
	o, err = parseFWFlags([]string{"-gen", "64, 256+backfill, 256+anchor+backfill"})
	if want := []fwGen{{64, false, false}, {256, true, false}, {256, true, true}}; err != nil || !slices.Equal(o.gens, want) {
		t.Fatalf("-gen 64,256+backfill,256+anchor+backfill: %v, %v, want %v", err, o.gens, want)
	}
	for _, bad := range [][]string{{"-levels", "0"}, {"-variants", "pf"}, {"-variants", "iptables,iptables"}, {"-reps", "0"},
		{"-flows", "0"}, {"-flows", "1,1"}, {"-flows", "25537"}, {"-flows", "x"},
		{"-gen", "0"}, {"-gen", "257"}, {"-gen", "64,64"}, {"-gen", "x"}, {"-gen", "64+fast"}, {"-gen", "64+anchor+anchor"}} {
		if _, err := parseFWFlags(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

func TestParseFWFlows(t *testing.T) {
	o, err := parseFWFlags([]string{"-flows", "256, 1,25536"})
	if err != nil || !slices.Equal(o.flows, []int{256, 1, 25536}) {
		t.Fatalf("-flows 256,1,25536: %v, %v", err, o.flows)
	}
}

// With two flow counts, each gets its own drop table, and the targets
// judge each against the other variants at the same flow count, labelled.
func TestFWMarkdownFlows(t *testing.T) {
	o := fwOptions{levels: []int{1}, variants: []string{"xlane-native", "iptables", "nftables", "xdp-drop"}, flows: []int{1, 256}}
	o.Reps = 1
	rep := &fwReport{Versions: map[string]string{}}
	for _, fl := range o.flows {
		f := float64(fl) // 256 flows: the baselines 256x faster, xlane-native the same
		rep.Samples = append(rep.Samples,
			fwSample{Variant: "xlane-native", Rules: 1, Flows: fl, DroppedMpps: 4},
			fwSample{Variant: "iptables", Rules: 1, Flows: fl, DroppedMpps: 1 * f},
			fwSample{Variant: "nftables", Rules: 1, Flows: fl, DroppedMpps: 1 * f},
			fwSample{Variant: "xdp-drop", Rules: 1, Flows: fl, DroppedMpps: 8 * f})
	}
	md := fwMarkdown(rep, o)
	i1, i256 := strings.Index(md, "#### 1 flow (source port 40000)\n"), strings.Index(md, "#### 256 flows (source ports 40000–40255, one after another)\n")
	it := strings.Index(md, "Targets")
	if i1 < 0 || i256 < i1 || it < i256 {
		t.Fatalf("want a drop table per flow count, 1 then 256, then the targets:\n%s", md)
	}
	for _, c := range []struct {
		section, want string
	}{
		{md[i1:i256], "| 1 | xlane-native | 4.000 | 0.000 | – | – | 4.00× | 4.00× | 0.50× |"},
		{md[i256:it], "| 1 | xlane-native | 4.000 | 0.000 | – | – | 0.02× | 0.02× | 0.00× |"},
		{md[it:], "| xlane-native | 1 | 1 (memories' best case) | 0.50 met | 4.00 met | 4.00 met |"},
		{md[it:], "| xlane-native | 1 | 256 (within the conntrack memory's 256 slots) | 0.00 **missed** | 0.02 **missed** | 0.02 **missed** |"},
		{md[it:], "The tuple memory still hits here"},
		{md, "Flows (-flows 1,256)"},
	} {
		if !strings.Contains(c.section, c.want) {
			t.Errorf("section lacks %q:\n%s", c.want, c.section)
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
		{Variant: "xlane-native", Rules: 1, DroppedMpps: 4, ProgNsPerPkt: 150, Offered: 100, RingFull: 40, Seconds: 1,
			NAPIBusyPct: 80, NAPISleeps: 6, NAPINsPerDrop: 240, GenNsPerFrame: 110, StealPct: 3},
		{Variant: "xlane-native", Rules: 10000, DroppedMpps: 4},
		{Variant: "xdp-drop", Rules: 1, DroppedMpps: 8, ProgNsPerPkt: 20, NAPIBusyPct: 70, Seconds: 2, NAPISleeps: 3000, NAPINsPerDrop: 88},
		{Variant: "xdp-drop", Rules: 10000, DroppedMpps: 8},
		{Variant: "xlane-generic", Rules: 1, DroppedMpps: 2}, {Variant: "xlane-generic", Rules: 10000, DroppedMpps: 2},
		{Variant: "iptables", Rules: 1, DroppedMpps: 1}, {Variant: "iptables", Rules: 10000, DroppedMpps: 0.01},
		{Variant: "nftables", Rules: 1, DroppedMpps: 2}, {Variant: "nftables", Rules: 10000, DroppedMpps: 0.02},
	} {
		rep.Samples = append(rep.Samples, s)
	}
	md := fwMarkdown(rep, o)
	for _, want := range []string{
		// receiver busy and ns/drop; vs iptables, nftables, the bare drop; ring full; generator; program
		// busy 80 % but hardly ever asleep: other load, not the generator: no ‡
		"| 1 | xlane-native | 4.000 | 0.000 | 80 %, 6 sleeps/s | 240 | 4.00× | 2.00× | 0.50× | 40 % | 110 | 150 |",
		"| 1 | xdp-drop | 8.000 ‡ | 0.000 | 70 %, 1500 sleeps/s | 88 | 8.00× | 4.00× | 1 | 0 % | – | 20 |", // ‡: the receiver ran dry
		"‡ The receiver ran out of frames",
		"steal on CPUs 0 and 1 during the drop runs: median 0.0 %, at most 3.0 %",
		"| 1 | nftables | 2.000 | 0.000 | – | – | 2.00× | 1 | 0.25× | 0 % | – | – |",
		"| 10000 | xlane-native | 4.000 |", "| 400.00× | 200.00× |",
		"xlane-native 1.00", "iptables 0.01",
		"| xlane-native | 1 | 1 | 0.50 met | 4.00 met | 2.00 **missed** |",
		"| xlane-native | 10000 | 1 | 0.50 met | 400.00 met | 200.00 met |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// With two generator batches, each gets its own table and targets, from
// its own samples.
func TestFWMarkdownBatches(t *testing.T) {
	o := fwOptions{levels: []int{1}, variants: []string{"xlane-native", "iptables", "nftables", "xdp-drop"}, gens: []fwGen{{64, false, false}, {256, false, false}}}
	o.Reps = 1
	rep := &fwReport{Versions: map[string]string{}}
	for _, g := range o.gens {
		b := g.batch
		f := float64(b) / 64 // batch 256: everything 4x
		rep.Samples = append(rep.Samples,
			fwSample{Variant: "xlane-native", Rules: 1, DroppedMpps: 2 * f, GenBatch: b},
			fwSample{Variant: "iptables", Rules: 1, DroppedMpps: 1, GenBatch: b},
			fwSample{Variant: "nftables", Rules: 1, DroppedMpps: 1, GenBatch: b},
			fwSample{Variant: "xdp-drop", Rules: 1, DroppedMpps: 8 * f, GenBatch: b})
	}
	md := fwMarkdown(rep, o)
	i64, i256 := strings.Index(md, "### Generator 64\n"), strings.Index(md, "### Generator 256\n")
	if i64 < 0 || i256 < i64 {
		t.Fatalf("want a section per batch, 64 then 256:\n%s", md)
	}
	for _, c := range []struct {
		section, want string
	}{
		{md[i64:i256], "| 1 | xlane-native | 2.000 |"},
		{md[i64:i256], "| xlane-native | 1 | 1 | 0.25 **missed** | 2.00 **missed** | 2.00 **missed** |"},
		{md[i256:], "| 1 | xlane-native | 8.000 |"},
		{md[i256:], "| xlane-native | 1 | 1 | 0.25 **missed** | 8.00 met | 8.00 met |"},
	} {
		if !strings.Contains(c.section, c.want) {
			t.Errorf("section lacks %q:\n%s", c.want, c.section)
		}
	}
}

// With the backfill thread, the receiver's idle time is that thread's run
// time, and above 5 % the rate is marked as the generator's.
func TestFWMarkdownBackfillIdle(t *testing.T) {
	o := fwOptions{levels: []int{1}, variants: []string{"xlane-native", "xdp-drop"}, gens: []fwGen{{256, true, true}}}
	o.Reps = 1
	rep := &fwReport{Versions: map[string]string{}, Samples: []fwSample{
		{Variant: "xlane-native", Rules: 1, DroppedMpps: 3, NAPIBusyPct: 96, NAPIIdlePct: 1, GenBackfill: true, GenBatch: 256},
		{Variant: "xdp-drop", Rules: 1, DroppedMpps: 7, NAPIBusyPct: 88, NAPIIdlePct: 9, GenBackfill: true, GenBatch: 256},
	}}
	md := fwMarkdown(rep, o)
	for _, want := range []string{"| 1 | xlane-native | 3.000 | 0.000 | 96 %, idle 1 % |", "| 1 | xdp-drop | 7.000 ‡ | 0.000 | 88 %, idle 9 % |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "### Generator") {
		t.Errorf("one generator setting: no per-setting sections:\n%s", md)
	}
}
