package bgp

import (
	"strings"
	"testing"
)

// TestParsePeers: the Node annotation's peers; a bad one names its field.
func TestParsePeers(t *testing.T) {
	ps, err := ParsePeers(`[{"address": "192.0.2.1", "asn": 65000, "bfd": true}, {"address": "2001:db8::1", "asn": 65000, "hold_time": 9}]`)
	if err != nil || len(ps) != 2 || !ps[0].BFD || ps[1].HoldTime != 9 || ps[0].Source != SourceNodeAnnotation {
		t.Fatalf("ParsePeers: %+v, %v", ps, err)
	}
	if ps, err := ParsePeers(" "); err != nil || len(ps) != 0 {
		t.Errorf("empty annotation: %+v, %v, want no peer", ps, err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"address": "192.0.2.1"}`, "peers json: cannot unmarshal"},
		{`[{"address": "192.0.2.1", "asn": 65000, "color": 1}]`, `unknown field "color"`},
		{`[{"address": "192.0.2.1", "asn": 0}]`, "peers[0].asn 0: reserved"},
		{`[{"address": "192.0.2.1", "asn": 65000}, {"address": "192.0.2.1", "asn": 65001}]`, "peers[1].address 192.0.2.1: listed twice"},
		{`[{"address": "192.0.2.1", "asn": 65000, "password": "x"}]`, "peers[0].password not taken"},
		{`[{"address": "192.0.2.1", "asn": 65000, "source": "cli"}]`, "peers[0].source"},
		{`[{"address": "192.0.2.1", "asn": 65000, "hold_time": 2}]`, "peers[0].hold_time 2"},
	} {
		if _, err := ParsePeers(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePeers(%s): %v, want an error with %q", c.in, err, c.want)
		}
	}
}
