package observe

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestMonitorFilter: each filter of `xlane monitor` keeps the events that
// involve what it names (by device, address, translation or port) and
// only those.
func TestMonitorFilter(t *testing.T) {
	web, client := epRef{"web", "blue"}, epRef{"client", "blue"}
	names := &monNames{byIfindex: map[uint32]epRef{7: client}, byAddr: map[netip.Addr]epRef{
		netip.MustParseAddr("10.83.0.2"): web, netip.MustParseAddr("10.83.0.3"): client},
		services: map[uint32]string{3: "websvc"}, devices: map[uint32]string{7: "xlhclient"}}
	m := &monitor{}
	m.names.Store(names)
	k := func(a string) [16]uint8 { return netip.MustParseAddr(a).As16() }
	drop := bpf.MonEvent{Type: uint8(bpf.MonDrop), Kind: bpf.FwKindFromEP, Ifindex: 7, Family: 4, Proto: 6,
		Saddr: k("::ffff:10.83.0.3"), Daddr: k("::ffff:10.83.0.2"), Sport: htons(40000), Dport: htons(8081),
		Reason: 20, Verdict: bpf.MonVDrop}
	nat := bpf.MonEvent{Type: uint8(bpf.MonNAT), Family: 4, Proto: 6, Action: uint8(bpf.CTNatDst),
		Saddr: k("::ffff:192.0.2.1"), Daddr: k("::ffff:192.0.2.2"), Sport: htons(5555), Dport: htons(8080),
		NatAddr: k("::ffff:10.83.0.2"), NatPort: htons(80)}
	lb := bpf.MonEvent{Type: uint8(bpf.MonLB), Kind: bpf.FwKindUplink + 1, Family: 4, Proto: 6, Service: 3,
		Daddr: k("::ffff:10.96.0.1"), Dport: htons(80), NatAddr: k("::ffff:10.83.0.2"), NatPort: htons(80)}
	reason := bpf.Reason(drop.Reason).String()
	cases := []struct {
		name string
		f    monFilter
		want [3]bool // drop, nat, lb
	}{
		{"none", monFilter{proto: -1}, [3]bool{true, true, true}},
		{"endpoint web (address, translation)", monFilter{endpoint: "web", proto: -1}, [3]bool{true, true, true}},
		{"endpoint client (device)", monFilter{endpoint: "client", proto: -1}, [3]bool{true, false, false}},
		{"network by subnet", monFilter{network: "red", subnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, proto: -1}, [3]bool{false, true, false}},
		{"prefix", monFilter{prefix: netip.MustParsePrefix("10.96.0.0/16"), proto: -1}, [3]bool{false, false, true}},
		{"port (translated)", monFilter{port: 80, proto: -1}, [3]bool{false, true, true}},
		{"port 8081", monFilter{port: 8081, proto: -1}, [3]bool{true, false, false}},
		{"udp", monFilter{proto: 17}, [3]bool{false, false, false}},
		{"reason", monFilter{proto: -1, reasons: map[string]bool{reason: true}}, [3]bool{true, false, false}},
	}
	for _, c := range cases {
		for i, e := range []bpf.MonEvent{drop, nat, lb} {
			ev, refs := m.describe(e)
			if got := c.f.match(&ev, refs); got != c.want[i] {
				t.Errorf("%s: %s event %+v: match %v, want %v", c.name, ev.Type, ev, got, c.want[i])
			}
		}
	}
	ev, _ := m.describe(lb)
	if want := (api.MonitorEvent{Type: "lb", Hook: "socket", Proto: "tcp", Dst: "10.96.0.1", DstPort: 80,
		Service: "websvc", NATDst: "10.83.0.2:80", Endpoint: "web", Network: "blue"}); ev.Time.IsZero() ||
		func() bool { ev.Time = want.Time; return ev != want }() {
		t.Errorf("lb event described as %+v, want %+v", ev, want)
	}
	// With the Hubble server's names (SetNamer): each address named, the
	// translated destination too.
	wl := map[netip.Addr]string{netip.MustParseAddr("10.83.0.2"): "blue/web", netip.MustParseAddr("10.83.0.3"): "blue/client"}
	name := func(a netip.Addr) string { return wl[a] }
	m.namer.Store(&name)
	if ev, _ := m.describe(lb); ev.SrcName != "" || ev.DstName != "" || ev.NATDstName != "blue/web" {
		t.Errorf("lb event named %q -> %q, backend %q: want the VIP unnamed, the backend blue/web", ev.SrcName, ev.DstName, ev.NATDstName)
	}
	if ev, _ := m.describe(drop); ev.SrcName != "blue/client" || ev.DstName != "blue/web" || ev.NATDstName != "" {
		t.Errorf("drop event named %q -> %q (%q): want blue/client -> blue/web", ev.SrcName, ev.DstName, ev.NATDstName)
	}
}

// TestPollInterval: the reader drains every 100 ms unless the rate on
// every CPU, bursts included, could fill an eighth of the 2 MiB ring
// (2,048 events of 128 bytes) sooner, or the last drain found that much.
func TestPollInterval(t *testing.T) {
	const ring = 2 << 20
	for _, c := range []struct {
		name string
		read int
		cpus int
		rate uint32
		want time.Duration
	}{
		{"2 CPUs at the default rate", 0, 2, 1000, monitorPoll},
		{"16 CPUs: 128 events a CPU, 100 of them a burst", 0, 16, 1000, 28 * time.Millisecond},
		{"64 CPUs: a burst fills an eighth", 0, 64, 1000, monitorPollMin},
		{"2 CPUs at 100,000/s", 0, 2, 100000, monitorPollMin},
		{"12 CPUs: 170 events a CPU", 0, 12, 1000, 70 * time.Millisecond},
		{"2 CPUs at 5,000/s: 524 past a burst, 105 ms", 0, 2, 5000, monitorPoll},
		{"the last drain found an eighth", ring / 8, 2, 1000, monitorPollMin},
		{"the last drain found less", ring/8 - 1, 2, 1000, monitorPoll},
		{"unlimited", 0, 2, 0, monitorPollMin},
	} {
		if got := pollInterval(ring, c.read, c.cpus, c.rate); got != c.want {
			t.Errorf("%s: pollInterval(read %d, %d CPUs, rate %d) = %v, want %v", c.name, c.read, c.cpus, c.rate, got, c.want)
		}
	}
}
