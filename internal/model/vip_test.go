package model

import (
	"net/netip"
	"testing"
)

func TestVIPAddrProblem(t *testing.T) {
	for _, tc := range []struct {
		addr string
		bad  bool
	}{
		{"0.0.0.0", true}, {"::", true}, {"::ffff:0.0.0.0", true}, {"0.1.2.3", true},
		{"255.255.255.255", true}, {"224.0.0.1", true}, {"239.1.2.3", true}, {"ff02::1", true}, {"ff0e::1", true},
		{"127.0.0.1", true}, {"127.5.5.5", true}, {"::1", true}, {"169.254.1.1", true}, {"fe80::1", true},
		{"10.96.0.1", false}, {"192.0.2.10", false}, {"fd00:96::1", false}, {"2001:db8::1", false}, {"1.2.3.4", false},
	} {
		got := VIPAddrProblem(netip.MustParseAddr(tc.addr))
		if (got != "") != tc.bad {
			t.Errorf("VIPAddrProblem(%s) = %q, want refused: %v", tc.addr, got, tc.bad)
		}
	}
}
