package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestBGPFlags: a bad --bgp-* flag fails the start, naming the flag.
func TestBGPFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" : no error
	}{
		{[]string{}, ""},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "192.0.2.1"}, ""},
		{[]string{"--bgp-asn", "65001"}, "bgp-router-id missing"},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "fd00::1"}, "bgp-router-id"},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "x"}, `bgp-router-id "x": not an IPv4 address`},
		{[]string{"--bgp-asn", "23456", "--bgp-router-id", "192.0.2.1"}, "bgp-asn 23456: reserved"},
		{[]string{"--bgp-asn", "5000000000", "--bgp-router-id", "192.0.2.1"}, "bgp-asn 5000000000"},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "192.0.2.1", "--bgp-stop", "now"}, `bgp-stop "now"`},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "192.0.2.1", "--bgp-learn", "yes"}, `bgp-learn "yes"`},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "192.0.2.1", "--bgp-advertise-service-cidr", "10.96.0.1/12"}, "bgp-advertise-service-cidr"},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "192.0.2.1", "--bgp-pod-community", "1:2:3"}, `bgp-pod-community "1:2:3"`},
		{[]string{"--bgp-asn", "65001", "--bgp-router-id", "192.0.2.1", "--bgp-restart-time", "2h"}, "bgp-restart-time"},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := addBGPFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		cfg, err := f.config("", "native")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		case c.want == "" && len(c.args) > 0 && (cfg == nil || !cfg.InstallRoutes):
			t.Errorf("%v: %+v, want a speaker installing routes (auto with --routing native)", c.args, cfg)
		}
	}
}
