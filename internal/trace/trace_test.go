package trace

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/xlane-dev/xlane/internal/api"
)

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

// TestBuildParse: what Build makes, Parse reads back, for both families
// and every protocol; the checksums are right (gopacket verifies them).
func TestBuildParse(t *testing.T) {
	cases := []struct {
		spec  Spec
		proto uint8
		want  string
	}{
		{Spec{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.3"), DstPort: 80}, 6,
			"tcp 10.0.0.2:40000 -> 10.0.0.3:80 [S] ttl 64"},
		{Spec{Src: netip.MustParseAddr("fd00::2"), Dst: netip.MustParseAddr("fd00::3"), Proto: "udp", DstPort: 9999}, 17,
			"udp [fd00::2]:40000 -> [fd00::3]:9999 ttl 64"},
		{Spec{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.3"), DstPort: 80, Flags: "FA"}, 6,
			"tcp 10.0.0.2:40000 -> 10.0.0.3:80 [AF] ttl 64"},
		{Spec{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.3"), Proto: "icmp"}, 1,
			"icmp 10.0.0.2 -> 10.0.0.3 type 8 code 0 ttl 64"},
		{Spec{Src: netip.MustParseAddr("fd00::2"), Dst: netip.MustParseAddr("fd00::3"), Proto: "icmp"}, 58,
			"icmpv6 fd00::2 -> fd00::3 type 128 code 0 ttl 64"},
	}
	for _, c := range cases {
		c.spec.SrcMAC, c.spec.DstMAC = macA, macB
		if c.spec.SrcPort == 0 && c.proto != 1 && c.proto != 58 {
			c.spec.SrcPort = 40000
		}
		f, err := Build(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.want, err)
		}
		tup, ok := Parse(f)
		if !ok || tup.Proto != c.proto || !strings.HasPrefix(tup.String(), c.want) {
			t.Errorf("built %q, parsed %q (ok %v, proto %d)", c.want, tup, ok, tup.Proto)
		}
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		if p.ErrorLayer() != nil {
			t.Errorf("%s: %v", c.want, p.ErrorLayer().Error())
		}
	}
	for _, bad := range []Spec{
		{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("fd00::3")},
		{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.3"), Proto: "sctp"},
		{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.3"), Flags: "X"},
	} {
		if _, err := Build(bad); err == nil {
			t.Errorf("Build(%+v) did not fail", bad)
		}
	}
}

// TestReadPcap: the first packet of a pcap and of a pcapng capture.
func TestReadPcap(t *testing.T) {
	f, err := Build(Spec{SrcMAC: macA, DstMAC: macB, Src: netip.MustParseAddr("10.0.0.2"),
		Dst: netip.MustParseAddr("10.0.0.3"), SrcPort: 1, DstPort: 2})
	if err != nil {
		t.Fatal(err)
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(f), Length: len(f)}
	var pc bytes.Buffer
	w := pcapgo.NewWriter(&pc)
	w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	w.WritePacket(ci, f)
	w.WritePacket(ci, []byte("second"))
	var ng bytes.Buffer
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	nw.WritePacket(ci, f)
	nw.Flush()
	for name, b := range map[string][]byte{"pcap": pc.Bytes(), "pcapng": ng.Bytes()} {
		got, err := ReadPcap(bytes.NewReader(b))
		if err != nil || !bytes.Equal(got, f) {
			t.Errorf("%s: %v, %d bytes, want the first packet (%d bytes)", name, err, len(got), len(f))
		}
	}
	if _, err := ReadPcap(strings.NewReader("not a capture")); err == nil {
		t.Errorf("ReadPcap of garbage did not fail")
	}
}

// TestStages: the stage that decided ends the list; its reason, rule or
// translation is said there.
func TestStages(t *testing.T) {
	cases := []struct {
		name string
		hop  Hop
		want []string // stage: result prefixes, in order
	}{
		{"spoofed", Hop{Hook: "from_endpoint", Reason: "drop_spoofed", Verdict: "drop"},
			[]string{"parse: ok", "admit: source address or MAC is not the sender's", "verdict: drop (drop_spoofed)"}},
		{"rule", Hop{Hook: "from_endpoint", Reason: "drop_fw", Verdict: "drop",
			Events: []api.MonitorEvent{{Type: "fw", Rule: "closed", Action: "drop"}, {Type: "verdict", Reason: "drop_fw", Rule: "closed"}}},
			[]string{"parse: ok", "admit: source", "firewall: rule closed: drop", "verdict: drop (drop_fw)"}},
		{"default policy", Hop{Hook: "to_endpoint", Reason: "drop_fw_default", Verdict: "drop"},
			[]string{"parse: ok", "firewall: the default policy: fw_default", "verdict: drop"}},
		{"service", Hop{Hook: "from_endpoint", Reason: "fwd_peer", Verdict: "forward", Route: "endpoint web",
			Events: []api.MonitorEvent{{Type: "flow_new", Action: "new"}, {Type: "nat", NATDst: "10.0.0.3:80"},
				{Type: "lb", Service: "web", Backend: 1, NATDst: "10.0.0.3:80"}}},
			[]string{"parse: ok", "admit: source", "firewall: no rule decided", "conntrack: new flow", "nat: new translation: destination to 10.0.0.3:80",
				"nat: service web: backend #1 10.0.0.3:80", "route: to a local endpoint (peer redirect into its namespace): endpoint web", "verdict: forward (fwd_peer)"}},
		{"established", Hop{Hook: "from_uplink", Reason: "fwd_peer", Verdict: "forward", Existing: "established, reply direction"},
			[]string{"parse: ok", "firewall: no rule", "conntrack: existing flow: established, reply direction", "nat: no translation", "route: to a local endpoint", "verdict: forward"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Stages(c.hop)
			var lines []string
			for _, s := range got {
				lines = append(lines, s.Stage+": "+s.Result)
			}
			ok := len(lines) == len(c.want)
			for i := 0; ok && i < len(lines); i++ {
				ok = strings.HasPrefix(lines[i], c.want[i])
			}
			if !ok {
				t.Errorf("stages:\n  %s\nwant:\n  %s", strings.Join(lines, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}
