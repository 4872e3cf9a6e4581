package calibrate

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Sample is one probe: TCP throughput of a mode for one address family,
// with BIG TCP on or off.
type Sample struct {
	Mode   string  `json:"mode"`
	Family string  `json:"family"` // ipv4, ipv6
	BigTCP bool    `json:"big_tcp,omitempty"`
	Gbps   float64 `json:"gbps"`
}

// Choice is what auto resolves to on this node, and why.
type Choice struct {
	Mode string `json:"mode"`
	// BigTCP4 and BigTCP6: BIG TCP won for the chosen mode in that family
	// by at least MinGain.
	BigTCP4 bool      `json:"big_tcp_ipv4"`
	BigTCP6 bool      `json:"big_tcp_ipv6"`
	Reason  string    `json:"reason"`
	Samples []Sample  `json:"samples"`
	At      time.Time `json:"at"`
	Took    string    `json:"took"`
}

// MinGain is how much faster BIG TCP must be before auto turns it on:
// below it, the measurement's noise decides.
const MinGain = 1.05

// Choose picks the mode with the highest throughput (the geometric mean of
// each family's best sample without BIG TCP; modes missing a family score
// on the families they have), then BIG TCP per family where the chosen
// mode's best sample with it beats the best without by MinGain.
func Choose(samples []Sample) (Choice, error) {
	best := map[[3]string]float64{} // mode, family, bigtcp -> best Gbps
	modes := map[string]bool{}
	for _, s := range samples {
		k := [3]string{s.Mode, s.Family, fmt.Sprint(s.BigTCP)}
		best[k] = math.Max(best[k], s.Gbps)
		modes[s.Mode] = true
	}
	type score struct {
		mode string
		g    float64
	}
	var scores []score
	for m := range modes {
		prod, n := 1.0, 0
		for _, f := range []string{"ipv4", "ipv6"} {
			if v := best[[3]string{m, f, "false"}]; v > 0 {
				prod *= v
				n++
			}
		}
		if n > 0 {
			scores = append(scores, score{m, math.Pow(prod, 1/float64(n))})
		}
	}
	if len(scores) == 0 {
		return Choice{}, fmt.Errorf("calibrate: no mode measured")
	}
	sort.Slice(scores, func(i, j int) bool {
		if scores[i].g != scores[j].g {
			return scores[i].g > scores[j].g
		}
		return scores[i].mode < scores[j].mode
	})
	c := Choice{Mode: scores[0].mode, Samples: samples}
	var parts []string
	for _, s := range scores {
		parts = append(parts, fmt.Sprintf("%s %.1f", s.mode, s.g))
	}
	c.Reason = fmt.Sprintf("%s: fastest TCP measured on this node (Gbit/s, geometric mean of IPv4 and IPv6: %s)",
		c.Mode, strings.Join(parts, ", "))
	for _, f := range []string{"ipv4", "ipv6"} {
		off := best[[3]string{c.Mode, f, "false"}]
		on := best[[3]string{c.Mode, f, "true"}]
		if on == 0 || off == 0 {
			continue
		}
		won := on >= off*MinGain
		if f == "ipv4" {
			c.BigTCP4 = won
		} else {
			c.BigTCP6 = won
		}
		verdict := "off"
		if won {
			verdict = "on"
		}
		c.Reason += fmt.Sprintf("; BIG TCP %s %s (%.1f vs %.1f Gbit/s without)", f, verdict, on, off)
	}
	return c, nil
}
