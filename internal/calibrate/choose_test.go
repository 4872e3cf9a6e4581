package calibrate

import (
	"slices"
	"strings"
	"testing"
)

// rounds makes the mode series of one mode: per round, the same Gbit/s in
// both families (so a round's score is that figure).
func rounds(mode string, gbps ...float64) []Sample {
	var out []Sample
	for r, g := range gbps {
		for _, f := range []string{"ipv4", "ipv6"} {
			out = append(out, Sample{Mode: mode, Family: f, Gbps: g, Probe: ProbeMode, Round: r})
		}
	}
	return out
}

func series(parts ...[]Sample) []Sample { return slices.Concat(parts...) }

// The rule: the default (tc) is left only for a mode whose slowest of
// Rounds interleaved rounds beats the default's fastest by Margin.
func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []Sample
		ranked  []string
		reason  string
		fail    bool
	}{
		{name: "none", fail: true},
		// The runs: kernel "won" by 1.4 % to 35 % on best samples,
		// with spreads that overlap tc's.
		{name: "noisy overlap keeps the default", samples: series(
			rounds("tc", 11.4, 9.0, 12.0), rounds("kernel", 12.9, 8.5, 10.3),
		), ranked: []string{"tc"}, reason: "tc: the default; no mode beat it"},
		{name: "a 35 % best-sample win that does not repeat", samples: series(
			rounds("tc", 10, 10.5, 11), rounds("kernel", 14.8, 10.2, 12),
		), ranked: []string{"tc"}, reason: "the default"},
		{name: "higher median, spreads overlap", samples: series(
			rounds("tc", 10, 11, 12), rounds("kernel", 11.9, 13, 14),
		), ranked: []string{"tc"}},
		{name: "apart, but within the margin", samples: series(
			rounds("tc", 10, 10.2, 10.4), rounds("kernel", 10.5, 10.8, 11),
		), ranked: []string{"tc"}},
		{name: "a clear repeated margin switches", samples: series(
			rounds("tc", 10, 10.5, 11), rounds("kernel", 12, 12.5, 13),
		), ranked: []string{"kernel", "tc"}, reason: "kernel: beat the default tc in every one of 3 rounds"},
		{name: "too few rounds to switch", samples: series(
			rounds("tc", 10, 10), rounds("kernel", 20, 20),
		), ranked: []string{"tc"}},
		{name: "every mode that beats the default, fastest median first", samples: series(
			rounds("tc", 10, 10, 10), rounds("kernel", 12, 13, 12), rounds("xdp", 15, 14, 16), rounds("xdp-generic", 5, 6, 5),
		), ranked: []string{"xdp", "kernel", "tc"}},
		{name: "slower modes never go before the default", samples: series(
			rounds("tc", 10, 10, 10), rounds("xdp", 3, 2, 3),
		), ranked: []string{"tc"}},
		{name: "the default not measured: as measured", samples: series(
			rounds("kernel", 10, 10, 10), rounds("xdp", 3, 2, 3),
		), ranked: []string{"kernel", "xdp"}, reason: "was not measured"},
		{name: "BIG TCP samples never rank a mode", samples: series(
			rounds("tc", 10, 10, 10),
			[]Sample{{Mode: "kernel", Family: "ipv4", BigTCP: true, Gbps: 90, Probe: ProbeBigTCP}},
		), ranked: []string{"tc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Choose(tc.samples, "tc")
			if tc.fail {
				if err == nil {
					t.Fatalf("Choose = %+v, want an error", c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Ranked, tc.ranked) || c.Mode != tc.ranked[0] {
				t.Fatalf("Choose = %s, ranked %v; want %v (%s)", c.Mode, c.Ranked, tc.ranked, c.Reason)
			}
			if !strings.HasPrefix(c.Reason, c.Mode+": ") || !strings.Contains(c.Reason, tc.reason) {
				t.Errorf("reason %q: want it to start with the mode and say %q", c.Reason, tc.reason)
			}
			if c.Rule != Rule || c.Version != RuleVersion || c.Default != "tc" {
				t.Errorf("rule %q version %d default %q: want the rule stated", c.Rule, c.Version, c.Default)
			}
		})
	}
}

// bigTCP makes a BIG TCP series on mode for one family: off and on per
// round.
func bigTCP(mode, family string, off, on []float64) []Sample {
	var out []Sample
	for r := range off {
		out = append(out, Sample{Mode: mode, Family: family, Gbps: off[r], Probe: ProbeBigTCP, Round: r},
			Sample{Mode: mode, Family: family, BigTCP: true, Gbps: on[r], Probe: ProbeBigTCP, Round: r})
	}
	return out
}

// BIG TCP by the same rule, per family, on the mode it was measured on.
func TestChooseBigTCP(t *testing.T) {
	for _, tc := range []struct {
		name       string
		samples    []Sample
		big4, big6 bool
	}{
		{name: "noisy overlap stays off", samples: series(
			bigTCP("tc", "ipv4", []float64{10, 13.3, 11}, []float64{10.3, 12, 14}),
			bigTCP("tc", "ipv6", []float64{12.4, 11, 12}, []float64{13.2, 12.5, 11.9}),
		)},
		{name: "a clear repeated win turns it on", samples: series(
			bigTCP("tc", "ipv4", []float64{10, 10.5, 11}, []float64{12, 12.5, 13}),
			bigTCP("tc", "ipv6", []float64{10, 10.5, 11}, []float64{11.2, 12, 13}),
		), big4: true},
		{name: "another mode's series does not count", samples: series(
			bigTCP("kernel", "ipv4", []float64{10, 10, 10}, []float64{20, 20, 20}),
		)},
		{name: "a zero sample (a failed flow) keeps it off", samples: series(
			bigTCP("tc", "ipv6", []float64{12.4, 12, 12}, []float64{0, 20, 20}),
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Choose(series(rounds("tc", 10, 10, 10), tc.samples), "tc")
			if err != nil {
				t.Fatal(err)
			}
			c.ChooseBigTCP("tc")
			if c.BigTCP4 != tc.big4 || c.BigTCP6 != tc.big6 || c.BigTCPMode != "tc" {
				t.Errorf("BIG TCP v4 %v v6 %v on %s, want v4 %v v6 %v on tc (%s)", c.BigTCP4, c.BigTCP6, c.BigTCPMode, tc.big4, tc.big6, c.Reason)
			}
		})
	}
}
