package calibrate

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Sample is one probe: TCP throughput of a mode for one address family,
// with BIG TCP on or off, in one round of one probe series.
type Sample struct {
	Mode   string  `json:"mode"`
	Family string  `json:"family"` // ipv4, ipv6
	BigTCP bool    `json:"big_tcp,omitempty"`
	Gbps   float64 `json:"gbps"`
	// Probe is the series: ProbeMode (every mode, BIG TCP off) or
	// ProbeBigTCP (one mode, BIG TCP off and on alternately).
	Probe string `json:"probe"`
	Round int    `json:"round"`
}

// The probe series.
const (
	ProbeMode   = "mode"
	ProbeBigTCP = "big-tcp"
)

// The decision rule (Rule states it): Rounds interleaved rounds, and a
// candidate replaces the default only where its slowest round beats the
// default's fastest by Margin.
const (
	Rounds = 3
	Margin = 1.05
	// RuleVersion changes with the rule: a choice stored under another
	// version is measured anew (the daemon's loadCalibration).
	RuleVersion = 2
)

// Rule says how a calibration decides, as status and `xlane calibrate
// --show` print it.
var Rule = fmt.Sprintf("a measured choice leaves the default only on a margin that repeats: "+
	"%d interleaved rounds (every mode in turn, the order reversed every other round; a round's score is the geometric mean "+
	"of its IPv4 and IPv6 TCP Gbit/s), and a mode replaces the default mode only when its slowest round beats the default's "+
	"fastest round by %.0f %% (their spreads do not overlap); BIG TCP goes on for a family by the same rule "+
	"(%d rounds of off and on in alternation: the slowest on beats the fastest off by %.0f %%); "+
	"auto then takes the first mode of the ranking that gives the network every feature it asks for",
	Rounds, (Margin-1)*100, Rounds, (Margin-1)*100)

// Score is one mode's rounds in the mode series.
type Score struct {
	Mode   string    `json:"mode"`
	Rounds []float64 `json:"rounds"` // Gbit/s, geometric mean of the families, per round
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Median float64   `json:"median"`
	// Beats: the rule let this mode replace the default.
	Beats bool `json:"beats_default,omitempty"`
}

// Choice is what auto resolves to on this node, and why.
type Choice struct {
	// Mode is the first of Ranked: what auto takes for a network that
	// Mode gives every feature it asks for.
	Mode string `json:"mode"`
	// Default is the mode auto takes unless a measurement beat it by the
	// rule; Ranked the modes auto may take, in order: those that beat the
	// default, fastest (median) first, then the default. Auto takes the
	// first that gives a network every feature it asks for.
	Default string   `json:"default"`
	Ranked  []string `json:"ranked"`
	Scores  []Score  `json:"scores"`
	// BigTCP4 and BigTCP6: BIG TCP beat no BIG TCP by the rule on
	// BigTCPMode in that family.
	BigTCP4    bool   `json:"big_tcp_ipv4"`
	BigTCP6    bool   `json:"big_tcp_ipv6"`
	BigTCPMode string `json:"big_tcp_mode,omitempty"`
	Rule       string `json:"rule"`
	// Version is RuleVersion when the choice was made.
	Version int       `json:"version"`
	Reason  string    `json:"reason"`
	Samples []Sample  `json:"samples"`
	At      time.Time `json:"at"`
	Took    string    `json:"took"`
}

// beats is the rule: every candidate round beats every baseline round by
// Margin, over at least Rounds rounds each.
func beats(candidate, baseline []float64) bool {
	if len(candidate) < Rounds || len(baseline) < Rounds {
		return false
	}
	return slices.Min(candidate) >= slices.Max(baseline)*Margin
}

// Choose ranks the modes of the mode series against def, the documented
// default: a mode goes before def only where it beats def by the rule.
func Choose(samples []Sample, def string) (Choice, error) {
	// mode -> round -> product and count of the families' Gbit/s
	type acc struct {
		prod float64
		n    int
	}
	per := map[string]map[int]*acc{}
	for _, s := range samples {
		if s.Probe != ProbeMode || s.BigTCP || s.Gbps <= 0 {
			continue
		}
		if per[s.Mode] == nil {
			per[s.Mode] = map[int]*acc{}
		}
		a := per[s.Mode][s.Round]
		if a == nil {
			a = &acc{prod: 1}
			per[s.Mode][s.Round] = a
		}
		a.prod *= s.Gbps
		a.n++
	}
	if len(per) == 0 {
		return Choice{}, fmt.Errorf("calibrate: no mode measured")
	}
	var scores []Score
	for m, rounds := range per {
		sc := Score{Mode: m}
		var keys []int
		for r := range rounds {
			keys = append(keys, r)
		}
		sort.Ints(keys)
		for _, r := range keys {
			a := rounds[r]
			sc.Rounds = append(sc.Rounds, math.Pow(a.prod, 1/float64(a.n)))
		}
		sc.Min, sc.Max, sc.Median = slices.Min(sc.Rounds), slices.Max(sc.Rounds), median(sc.Rounds)
		scores = append(scores, sc)
	}
	sort.Slice(scores, func(i, j int) bool {
		if scores[i].Median != scores[j].Median {
			return scores[i].Median > scores[j].Median
		}
		return scores[i].Mode < scores[j].Mode
	})
	c := Choice{Default: def, Scores: scores, Samples: samples, Rule: Rule, Version: RuleVersion}
	i := slices.IndexFunc(scores, func(s Score) bool { return s.Mode == def })
	if i < 0 {
		// Nothing to measure against: the fastest by median, as measured.
		for _, s := range scores {
			c.Ranked = append(c.Ranked, s.Mode)
		}
		c.Mode = c.Ranked[0]
		c.Reason = fmt.Sprintf("%s: fastest median here (the default %s was not measured; %s)", c.Mode, def, scoreList(scores))
		return c, nil
	}
	base := scores[i].Rounds
	for k := range scores {
		if scores[k].Mode != def && beats(scores[k].Rounds, base) {
			scores[k].Beats = true
			c.Ranked = append(c.Ranked, scores[k].Mode)
		}
	}
	c.Ranked = append(c.Ranked, def)
	c.Mode = c.Ranked[0]
	if c.Mode == def {
		c.Reason = fmt.Sprintf("%s: the default; no mode beat it by the rule (%d rounds, slowest beats fastest by %.0f %%; Gbit/s min-max: %s)",
			def, Rounds, (Margin-1)*100, scoreList(scores))
	} else {
		c.Reason = fmt.Sprintf("%s: beat the default %s in every one of %d rounds by %.0f %% or more (Gbit/s min-max: %s)",
			c.Mode, def, len(base), (Margin-1)*100, scoreList(scores))
	}
	return c, nil
}

// ChooseBigTCP decides BIG TCP per family from the BIG TCP series run on
// mode: on where every on sample beats every off sample by the rule.
func (c *Choice) ChooseBigTCP(mode string) {
	c.BigTCPMode = mode
	c.BigTCP4, c.BigTCP6 = false, false
	for _, f := range []string{"ipv4", "ipv6"} {
		var on, off []float64
		for _, s := range c.Samples {
			if s.Probe != ProbeBigTCP || s.Mode != mode || s.Family != f {
				continue
			}
			if s.BigTCP {
				on = append(on, s.Gbps)
			} else {
				off = append(off, s.Gbps)
			}
		}
		if len(on) == 0 || len(off) == 0 {
			continue
		}
		won := beats(on, off)
		if f == "ipv4" {
			c.BigTCP4 = won
		} else {
			c.BigTCP6 = won
		}
		c.Reason += fmt.Sprintf("; BIG TCP %s: %s (measured on %s: on %s vs off %s Gbit/s)", f, onOff(won), mode, spread(on), spread(off))
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(v []float64) string {
	return fmt.Sprintf("%.1f-%.1f", slices.Min(v), slices.Max(v))
}

func scoreList(scores []Score) string {
	var parts []string
	for _, s := range scores {
		parts = append(parts, s.Mode+" "+spread(s.Rounds))
	}
	return strings.Join(parts, ", ")
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
