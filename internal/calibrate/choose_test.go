package calibrate

import (
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name             string
		samples          []Sample
		mode             string
		big4, big6, fail bool
	}{
		{name: "none", fail: true},
		{name: "fastest by geometric mean", samples: []Sample{
			{Mode: "tc", Family: "ipv4", Gbps: 20}, {Mode: "tc", Family: "ipv6", Gbps: 18},
			{Mode: "xdp", Family: "ipv4", Gbps: 35}, {Mode: "xdp", Family: "ipv6", Gbps: 5},
			{Mode: "kernel", Family: "ipv4", Gbps: 17}, {Mode: "kernel", Family: "ipv6", Gbps: 16},
		}, mode: "tc"},
		{name: "best of repeats", samples: []Sample{
			{Mode: "tc", Family: "ipv4", Gbps: 10}, {Mode: "tc", Family: "ipv4", Gbps: 30},
			{Mode: "kernel", Family: "ipv4", Gbps: 20},
		}, mode: "tc"},
		{name: "big tcp only where it wins by MinGain", samples: []Sample{
			{Mode: "tc", Family: "ipv4", Gbps: 20}, {Mode: "tc", Family: "ipv4", BigTCP: true, Gbps: 20.5},
			{Mode: "tc", Family: "ipv6", Gbps: 18}, {Mode: "tc", Family: "ipv6", BigTCP: true, Gbps: 25},
			// BIG TCP samples never choose the mode.
			{Mode: "kernel", Family: "ipv4", BigTCP: true, Gbps: 90},
		}, mode: "tc", big6: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Choose(tc.samples)
			if tc.fail {
				if err == nil {
					t.Fatalf("Choose = %+v, want an error", c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Mode != tc.mode || c.BigTCP4 != tc.big4 || c.BigTCP6 != tc.big6 {
				t.Fatalf("Choose = %s big4 %v big6 %v, want %s %v %v (%s)", c.Mode, c.BigTCP4, c.BigTCP6, tc.mode, tc.big4, tc.big6, c.Reason)
			}
			if !strings.HasPrefix(c.Reason, tc.mode+": ") {
				t.Errorf("reason %q does not start with the mode", c.Reason)
			}
		})
	}
}
