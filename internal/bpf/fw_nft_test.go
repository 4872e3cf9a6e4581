package bpf_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
)

// The iptables-expressible subset against nftables: random uplink rule
// sets (one prefix, one port range per field, as an iptables rule has)
// are loaded both into xlane and, translated, into an nftables netdev
// ingress chain on a veth in the test namespace; every packet is sent
// into that veth with AF_PACKET and run through the uplink program. The
// rules whose counters moved in nftables (log rules, which continue, and
// the one that decided) must be the ones xlane's events name, and the
// verdicts must agree.

// nftRule translates a validated single-match rule to nftables syntax.
func nftRule(r firewall.PRule, m firewall.Match, comment string) string {
	var e []string
	fam := ""
	switch {
	case m.V4 && !m.V6:
		fam = "ip"
		e = append(e, "meta protocol ip")
	case m.V6 && !m.V4:
		fam = "ip6"
		e = append(e, "meta protocol ip6")
	}
	prefix := func(field string, v4, v6 []string) {
		ps := v4
		if fam == "ip6" {
			ps = v6
		}
		if len(ps) == 1 && !strings.HasSuffix(ps[0], "/0") {
			e = append(e, fmt.Sprintf("%s %s %s", fam, field, ps[0]))
		}
	}
	strs := func(ps interface{ String() string }) string { return ps.String() }
	_ = strs
	var s4, s6, d4, d6 []string
	for _, p := range m.Src4 {
		s4 = append(s4, p.String())
	}
	for _, p := range m.Src6 {
		s6 = append(s6, p.String())
	}
	for _, p := range m.Dst4 {
		d4 = append(d4, p.String())
	}
	for _, p := range m.Dst6 {
		d6 = append(d6, p.String())
	}
	if fam != "" {
		prefix("saddr", s4, s6)
		prefix("daddr", d4, d6)
	}
	l4 := ""
	if len(m.Proto) == 1 {
		l4 = map[uint8]string{6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6"}[m.Proto[0]]
		e = append(e, fmt.Sprintf("meta l4proto %d", m.Proto[0]))
	}
	rng := func(r firewall.PortRange) string {
		if r.Lo == r.Hi {
			return fmt.Sprint(r.Lo)
		}
		return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
	}
	switch l4 {
	case "tcp", "udp":
		if len(m.SPort) == 1 {
			e = append(e, fmt.Sprintf("%s sport %s", l4, rng(m.SPort[0])))
		}
		if len(m.DPort) == 1 {
			e = append(e, fmt.Sprintf("%s dport %s", l4, rng(m.DPort[0])))
		}
	case "icmp", "icmpv6":
		if len(m.DPort) == 1 {
			e = append(e, fmt.Sprintf("%s type %s", l4, rng(m.DPort[0])))
		}
		if len(m.SPort) == 1 {
			e = append(e, fmt.Sprintf("%s code %s", l4, rng(m.SPort[0])))
		}
	}
	if m.FlagsMask != 0 {
		names := []string{"fin", "syn", "rst", "psh", "ack", "urg", "ecn", "cwr"}
		var mask, comp []string
		for i, n := range names {
			if m.FlagsMask&(1<<i) != 0 {
				mask = append(mask, n)
			}
			if m.FlagsComp&(1<<i) != 0 {
				comp = append(comp, n)
			}
		}
		c := "0x0"
		if len(comp) > 0 {
			c = strings.Join(comp, "|")
		}
		e = append(e, fmt.Sprintf("tcp flags & (%s) == %s", strings.Join(mask, "|"), c))
	}
	if len(m.SMAC) == 1 {
		e = append(e, "ether saddr "+net.HardwareAddr(m.SMAC[0][:]).String())
	}
	e = append(e, "counter")
	switch r.Action {
	case bpf.FwAllow:
		e = append(e, "accept")
	case bpf.FwDrop, bpf.FwReject:
		e = append(e, "drop")
	}
	return strings.Join(e, " ") + fmt.Sprintf(" comment %q", comment)
}

// nftRuleSet makes n uplink rules of the iptables-expressible subset.
func nftRuleSet(r *rand.Rand, n int) *firewall.RuleSet {
	f := false
	rs := &firewall.RuleSet{Established: &f}
	full := fwtest.RandomRuleSet(r, n)
	for _, x := range full.Rules {
		x.Scope, x.Direction, x.Priority = "uplink", "", 0
		if len(x.Proto) > 1 {
			x.Proto = x.Proto[:1]
		}
		if x.Proto == nil || (x.Proto[0] != "tcp" && x.Proto[0] != "udp") {
			x.SrcPort, x.DstPort = nil, nil
		}
		if x.Proto == nil || x.Proto[0] != "tcp" {
			x.TCPFlags = ""
		}
		if x.Proto == nil || (x.Proto[0] != "icmp" && x.Proto[0] != "icmpv6") {
			x.ICMPType = nil
		}
		x.Src, x.Dst, x.SrcPort, x.DstPort = first(x.Src), first(x.Dst), first(x.SrcPort), first(x.DstPort)
		x.DstMAC = nil
		if x.Action == "reject" {
			x.Action = "drop"
		}
		rs.Rules = append(rs.Rules, x)
	}
	if r.IntN(2) == 0 {
		rs.Defaults = []firewall.Default{{Scope: "uplink", Action: "drop"}}
	}
	return rs
}

func first(l firewall.List) firewall.List {
	if len(l) > 1 {
		return l[:1]
	}
	return l
}

// nftCounters returns the packets counted by each commented rule.
func (h *fwHarness) nftCounters(tb testing.TB) map[string]uint64 {
	tb.Helper()
	var out []byte
	err := h.do(func() (err error) {
		out, err = exec.Command("nft", "-j", "list", "chain", "netdev", "xlfw", "in").Output()
		return err
	})
	if err != nil {
		tb.Fatalf("nft list: %v", err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		tb.Fatal(err)
	}
	got := map[string]uint64{}
	for _, o := range doc.Nftables {
		raw, ok := o["rule"]
		if !ok {
			continue
		}
		var rule struct {
			Comment string                       `json:"comment"`
			Expr    []map[string]json.RawMessage `json:"expr"`
		}
		json.Unmarshal(raw, &rule)
		for _, ex := range rule.Expr {
			if c, ok := ex["counter"]; ok {
				var cnt struct{ Packets uint64 }
				json.Unmarshal(c, &cnt)
				got[rule.Comment] = cnt.Packets
			}
		}
	}
	return got
}

func TestFirewallAgainstNftables(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft not found: the differential test against nftables needs it")
	}
	h := newFwHarness(t)
	nl, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nft0"}, PeerName: "nft1"}); err != nil {
		t.Fatal(err)
	}
	// No traffic of the kernel's own (IPv6 autoconfiguration, MLD) on
	// the veth: only the test's packets may move the counters.
	err = h.do(func() error {
		for _, n := range []string{"nft0", "nft1"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n+"/disable_ipv6", []byte("1"), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ifindex int
	for _, n := range []string{"nft0", "nft1"} {
		l, err := nl.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		nl.LinkSetUp(l)
		if n == "nft0" {
			ifindex = l.Attrs().Index
		}
	}
	// nft must run in the test namespace (the child inherits the thread's
	// namespace): make sure before anything is flushed.
	err = h.do(func() error {
		out, err := exec.Command("ip", "-o", "link", "show", "nft1").CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft1 not visible to child processes: %v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 5, 20, 100, 400}
	packets := 150
	if testing.Short() {
		sizes, packets = []int{5, 50}, 40
	}
	for seed, n := range sizes {
		rng := rand.New(rand.NewPCG(uint64(seed)+900, uint64(n)))
		rs := nftRuleSet(rng, n)
		pol := h.install(t, rs, true)
		var b strings.Builder
		policy := "accept"
		for i, r := range pol.Rules {
			if r.Default {
				policy = "drop"
				continue
			}
			for _, m := range r.Matches {
				fmt.Fprintf(&b, "    %s\n", nftRule(r, m, fmt.Sprint(i)))
			}
		}
		script := fmt.Sprintf("table netdev xlfw\ndelete table netdev xlfw\ntable netdev xlfw {\n  chain in {\n    type filter hook ingress device \"nft1\" priority 0; policy %s;\n%s  }\n}\n", policy, b.String())
		err := h.do(func() error {
			cmd := exec.Command("nft", "-f", "-")
			cmd.Stdin = strings.NewReader(script)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("load nftables rules: %v\n%s", err, script)
		}
		h.drain(t)
		before := h.nftCounters(t)
		hits := 0
		for i := 0; i < packets; i++ {
			pk := fwtest.RandomPacket(rng, firewall.KindUplink)
			if linkScope(pk.Dst) || linkScope(pk.Src) || isEndpoint(pk.Dst) {
				i--
				continue
			}
			frame, err := fwtest.Frame(pk)
			if err != nil {
				t.Fatal(err)
			}
			refused, _, err := h.run(firewall.KindUplink, frame)
			if err != nil {
				t.Fatal(err)
			}
			got := h.drain(t)
			err = h.do(func() error {
				fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: ifindex})
			})
			if err != nil {
				t.Fatal(err)
			}
			after := h.nftCounters(t)
			var moved []int
			for name, c := range after {
				if c != before[name] {
					var idx int
					fmt.Sscan(name, &idx)
					moved = append(moved, idx)
				}
			}
			before = after
			if len(moved) > 0 {
				hits++
			}
			slices.Sort(moved)
			nftDrop := policy == "drop"
			if len(moved) > 0 {
				last := pol.Rules[moved[len(moved)-1]]
				if last.Action != bpf.FwLog {
					nftDrop = last.Action != bpf.FwAllow
				}
			}
			var xl []int
			for _, s := range got {
				if !pol.Rules[s].Default {
					xl = append(xl, s)
				}
			}
			slices.Sort(xl)
			if fmt.Sprint(moved) != fmt.Sprint(xl) || nftDrop != refused {
				t.Fatalf("%d rules, packet %+v:\n\tnftables: rules %v, drop %v\n\txlane:    rules %v, drop %v\nnftables:\n%s",
					n, pk, moved, nftDrop, xl, refused, script)
			}
		}
		t.Logf("%d rules: %d packets (%d matched some rule), nftables and xlane agree", n, packets, hits)
	}
	h.do(func() error { return exec.Command("nft", "delete", "table", "netdev", "xlfw").Run() })
}
