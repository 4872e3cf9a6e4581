package wireguard

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNodeRules: --encryption-node's rules per family: ICMP of the
// family, the VXLAN port and the API server of that family (to it, and
// its answers) left to the main table, everything else without the device's fwmark to NodeTable.
func TestNodeRules(t *testing.T) {
	tn := &Tunnel{cfg: Config{Node: true, VXLANPort: 4789,
		ClearTCP: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.10:6443"), netip.MustParseAddrPort("[2001:db8::10]:6443")}}}
	rules := tn.nodeRules()
	var got []string
	for _, r := range rules {
		fam := "4"
		if r.Family == unix.AF_INET6 {
			fam = "6"
		}
		s := []string{fam, "pref", strconv.Itoa(r.Priority), "table", strconv.Itoa(r.Table), "proto", strconv.Itoa(r.IPProto)}
		if r.Dst != nil {
			s = append(s, "to", r.Dst.String())
		}
		if r.Src != nil {
			s = append(s, "from", r.Src.String())
		}
		if r.Dport != nil {
			s = append(s, "dport", strconv.Itoa(int(r.Dport.Start)))
		}
		if r.Sport != nil {
			s = append(s, "sport", strconv.Itoa(int(r.Sport.Start)))
		}
		if r.Mask != nil {
			s = append(s, "mark", strconv.Itoa(int(r.Mark)), "mask", strconv.Itoa(int(*r.Mask)), "invert", map[bool]string{true: "y", false: "n"}[r.Invert])
		}
		if r.Protocol != RouteProtocol {
			t.Errorf("rule %v: protocol %d, want %d (ownRules finds them by it)", s, r.Protocol, RouteProtocol)
		}
		got = append(got, strings.Join(s, " "))
	}
	want := []string{
		"4 pref 120 table 254 proto 1",
		"4 pref 120 table 254 proto 17 dport 4789",
		"4 pref 120 table 254 proto 6 to 192.0.2.10/32 dport 6443",
		"4 pref 120 table 254 proto 6 from 192.0.2.10/32 sport 6443",
		"4 pref 121 table 121 proto 0 mark 2021064704 mask 4294901760 invert y",
		"6 pref 120 table 254 proto 58",
		"6 pref 120 table 254 proto 17 dport 4789",
		"6 pref 120 table 254 proto 6 to 2001:db8::10/128 dport 6443",
		"6 pref 120 table 254 proto 6 from 2001:db8::10/128 sport 6443",
		"6 pref 121 table 121 proto 0 mark 2021064704 mask 4294901760 invert y",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
