package model

import (
	"net/netip"
	"testing"
)

func TestParsePortMapping(t *testing.T) {
	for _, c := range []struct {
		in   string
		want PortMapping
		err  bool
	}{
		{in: "8080", want: PortMapping{Proto: "tcp", NodePort: 8080, Port: 8080}},
		{in: "8080:80/udp", want: PortMapping{Proto: "udp", NodePort: 8080, Port: 80}},
		{in: "127.0.0.1:8080:80", want: PortMapping{Proto: "tcp", NodePort: 8080, Port: 80, HostIP: netip.MustParseAddr("127.0.0.1")}},
		{in: "[fd00::1]:53:5353/udp", want: PortMapping{Proto: "udp", NodePort: 53, Port: 5353, HostIP: netip.MustParseAddr("fd00::1")}},
		{in: "0.0.0.0:8080:80", want: PortMapping{Proto: "tcp", NodePort: 8080, Port: 80}},
		{in: "[::]:8080:80", want: PortMapping{Proto: "tcp", NodePort: 8080, Port: 80}},
		{in: "fd00::1:53:53", err: true}, // IPv6 without brackets
		{in: "host:80:80", err: true},
		{in: "10.0.0.1:0:80", err: true},
		{in: "80:80/sctp", err: true},
	} {
		got, err := ParsePortMapping(c.in)
		if (err != nil) != c.err || err == nil && got != c.want {
			t.Errorf("%q: %+v, %v; want %+v (error %v)", c.in, got, err, c.want, c.err)
			continue
		}
		if err == nil {
			if back, err := ParsePortMapping(got.String()); err != nil || back != got {
				t.Errorf("%q: String %q reads back as %+v, %v", c.in, got.String(), back, err)
			}
		}
	}
	a, _ := ParsePortMapping("127.0.0.1:80:80")
	b, _ := ParsePortMapping("192.0.2.1:80:80")
	u, _ := ParsePortMapping("192.0.2.1:80:80/udp")
	all, _ := ParsePortMapping("80:80")
	if a.SameHostPort(b) || b.SameHostPort(u) || !all.SameHostPort(a) || !b.SameHostPort(b) {
		t.Errorf("SameHostPort: different host IPs or protocols coexist, every address takes them all")
	}
}
