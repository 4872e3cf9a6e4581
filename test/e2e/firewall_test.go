package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

//	 node netns (xlaned)                        container netns
//	+--------------------------------------+
//	| lo: 10.91.0.1 (gateway)              |    +-----------+
//	| xlhAAAA -----------------------------------|eth0 .2    | c0 (server)
//	| xlhBBBB -----------------------------------|eth0 .3    | c1 (client)
//	| xlhCCCC -----------------------------------|eth0 .4    | c2 (other)
//	+--------------------------------------+    +-----------+
//
// The firewall end to end, per BPF mode: rule files applied with `xlane fw
// apply` while a paced TCP transfer runs (every packet of it classified,
// established off: not one may be lost, the receiver's SHA-256 and the
// sender's retransmission counter say so), a dropped port that is really
// unreachable, a rejected one refused at once, a file with an error that
// changes nothing, counters in `xlane fw ls`.
func TestFirewall(t *testing.T) {
	for _, mode := range []string{"tc", "xdp"} {
		t.Run(mode, func(t *testing.T) { testFirewall(t, mode) })
	}
}

type fwEnv struct {
	n   *node
	cs  []string
	eps []api.EndpointInfo
	dir string
}

func newFwEnv(t *testing.T, mode string) *fwEnv {
	n := newNode(t)
	requireMode(t, n, mode)
	n.mustXlane(nil, "network", "create", "blue", "--subnet", "10.91.0.0/24", "--subnet", "fd00:91::/64", "--mode", mode)
	e := &fwEnv{n: n, dir: t.TempDir()}
	for i := 0; i < 3; i++ {
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "blue", "--netns", c)
		e.cs, e.eps = append(e.cs, c), append(e.eps, ep)
	}
	return e
}

func (e *fwEnv) v4(i int) netip.Addr { return e.eps[i].IPs[0] }

// apply writes yaml to a file and runs `xlane fw apply` on it.
func (e *fwEnv) apply(t *testing.T, name, yaml string) (stdout, stderr string, err error) {
	t.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return e.n.xlane("fw", "apply", path)
}

func (e *fwEnv) mustApply(t *testing.T, name, yaml string) {
	t.Helper()
	if _, stderr, err := e.apply(t, name, yaml); err != nil {
		t.Fatalf("xlane fw apply %s: %v\n%s", name, err, stderr)
	}
}

func (e *fwEnv) firewall(t *testing.T) api.Firewall {
	t.Helper()
	var fw api.Firewall
	e.n.mustXlane(&fw, "fw", "ls")
	return fw
}

// listen opens a TCP listener in netns on addr:port that accepts and
// closes connections.
func listen(t *testing.T, netns string, addr netip.Addr, port int) {
	t.Helper()
	acceptAndClose(listenIn(t, netns, netip.AddrPortFrom(addr, uint16(port))))
}

// dial connects from netns to addr:port within timeout.
func dial(netns string, addr netip.Addr, port int, timeout time.Duration) error {
	return ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, uint16(port)).String(), timeout)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// udpRefused sends a datagram from netns to addr:port on a connected UDP
// socket and returns the error of the read that follows (nil: an answer).
func udpRefused(netns string, addr netip.Addr, port int, timeout time.Duration) error {
	return ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		c, err := net.Dial("udp", netip.AddrPortFrom(addr, uint16(port)).String())
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("xlane reject test")); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(timeout))
		_, err = c.Read(make([]byte, 64))
		return err
	})
}

// tcpRetrans reads the TCP retransmitted-segment counter of netns.
func tcpRetrans(t *testing.T, netns string) int {
	t.Helper()
	out := runIn(t, netns, "cat", "/proc/net/snmp")
	var names []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "RetransSegs" && i < len(f) {
				v, _ := strconv.Atoi(f[i])
				return v
			}
		}
	}
	t.Fatalf("no RetransSegs in %s's /proc/net/snmp", netns)
	return 0
}

// fillerRules are n rules that match none of the test's traffic (UDP to
// ports offset by gen), so every generation's tables differ.
func fillerRules(n, gen int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: filler-%d, proto: udp, dport: %d, src: 198.18.%d.%d/32, action: drop}\n",
			i, 20000+(i+gen)%20000, (i/250)%250, i%250+1)
	}
	return b.String()
}

func testFirewall(t *testing.T, mode string) {
	e := newFwEnv(t, mode)
	c0, c1, c2 := e.cs[0], e.cs[1], e.cs[2]

	// The bulk flow c1 -> c0:port is allowed both ways by rules; the
	// blue network's default drops everything else that reaches an
	// endpoint. Established flows are classified like new ones, so
	// every packet of the transfer meets every generation.
	ruleset := func(gen int) string {
		return fmt.Sprintf(`established: false
defaults:
  - {scope: network:blue, direction: to-endpoint, action: drop}
rules:
  - name: bulk-to-server
    scope: network:blue
    direction: to-endpoint
    proto: tcp
    src: %s
    dst: %s
    action: allow
  - name: bulk-to-client
    scope: network:blue
    direction: to-endpoint
    proto: tcp
    src: %s
    dst: %s
    action: allow
  - name: ping
    proto: icmp
    action: allow
%s`, e.v4(1), e.v4(0), e.v4(0), e.v4(1), fillerRules(2000, gen))
	}
	applyStart := time.Now()
	e.mustApply(t, "gen0.yaml", ruleset(0))
	applyTook := time.Since(applyStart)
	ping(t, c1, e.v4(0))

	t.Run("atomic updates under load", func(t *testing.T) {
		before := tcpRetrans(t, c1)
		// A transfer of at least 4 s, and long enough for 4 applies at the
		// pace the first one took (a loaded machine: the suite runs in two
		// shards side by side).
		const rate = 6 << 20
		applying := max(3*time.Second, 4*applyTook)
		size := int64(float64(rate) * (applying + time.Second).Seconds())
		wait := startTransfer(t, c1, c0, e.v4(0), size, rate)
		start := time.Now()
		applies := 0
		for gen := 1; time.Since(start) < applying; gen++ {
			e.mustApply(t, fmt.Sprintf("gen%d.yaml", gen), ruleset(gen))
			applies++
		}
		wait()
		if applies < 3 {
			t.Fatalf("only %d rule-set applies during the transfer: the test proves little", applies)
		}
		retrans := tcpRetrans(t, c1) - before
		// The firewall loses a packet only by dropping it, and every drop
		// is counted: by the rule (here only the default policy could
		// match the flow) and under a drop reason.
		fw := e.firewall(t)
		for _, r := range fw.Defaults {
			if r.Packets != 0 {
				t.Fatalf("default policy %s dropped %d packets during the updates (%d retransmissions)", r.Name, r.Packets, retrans)
			}
		}
		for _, d := range fw.Drops {
			if strings.HasPrefix(d.Reason, "drop_") && d.Packets != 0 {
				t.Fatalf("%d packets dropped (%s) during the updates", d.Packets, d.Reason)
			}
		}
		var bulk api.FirewallRule
		for _, r := range fw.Rules {
			if r.Name == "bulk-to-server" {
				bulk = r
			}
		}
		if bulk.Packets < 100 || bulk.LastHit == nil {
			t.Fatalf("rule bulk-to-server counted %d packets (last hit %v), want the transfer's", bulk.Packets, bulk.LastHit)
		}
		t.Logf("%d applies of 2003 rules during a 24 MB transfer: no drop, %d TCP retransmissions (loss probes while the CPUs compile); bulk-to-server %d packets %d bytes",
			applies, retrans, bulk.Packets, bulk.Bytes)
	})

	listen(t, c0, e.v4(0), 8081)
	listen(t, c0, e.v4(0), 8082)
	listen(t, c0, e.v4(0), 8083)
	t.Run("dropped and rejected ports", func(t *testing.T) {
		e.mustApply(t, "ports.yaml", fmt.Sprintf(`rules:
  - {name: closed, scope: network:blue, direction: to-endpoint, proto: tcp, dport: 8081, action: drop}
  - {name: refused, scope: network:blue, direction: to-endpoint, proto: tcp, dport: 8082, action: reject}
  - {name: c2-out, scope: endpoint:%s, direction: from-endpoint, proto: tcp, dport: 8083, action: drop}
  - {name: udp-refused, scope: network:blue, direction: to-endpoint, proto: udp, dport: 8084, action: reject}
`, e.eps[2].ID))
		if err := dial(c1, e.v4(0), 8083, 2*time.Second); err != nil {
			t.Fatalf("port 8083 from c1 (allowed): %v", err)
		}
		err := dial(c1, e.v4(0), 8081, 2*time.Second)
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("port 8081 (dropped): dial = %v, want a timeout", err)
		}
		if err := dial(c2, e.v4(0), 8083, 2*time.Second); err == nil {
			t.Fatalf("port 8083 from c2 (its egress drops it): connected")
		}
		// A reject answers the SYN with an RST: refused at once.
		begin := time.Now()
		err = dial(c1, e.v4(0), 8082, 5*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(begin) > time.Second {
			t.Fatalf("port 8082 (rejected): dial = %v after %v, want connection refused at once", err, time.Since(begin))
		}
		// A rejected UDP datagram is answered with an ICMP port
		// unreachable: the sender's connected socket sees ECONNREFUSED.
		for _, a := range e.eps[0].IPs {
			begin = time.Now()
			if err := udpRefused(c1, a, 8084, 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) || time.Since(begin) > time.Second {
				t.Fatalf("udp %s:8084 (rejected): read = %v after %v, want connection refused at once", a, err, time.Since(begin))
			}
		}
		fw := e.firewall(t)
		counts := map[string]uint64{}
		for _, r := range fw.Rules {
			counts[r.Name] = r.Packets
		}
		for _, name := range []string{"closed", "refused", "c2-out", "udp-refused"} {
			if counts[name] == 0 {
				t.Fatalf("rule %s counted no packet: %v", name, counts)
			}
		}
		drops := map[string]uint64{}
		for _, d := range fw.Drops {
			drops[d.Reason] += d.Packets
		}
		if drops["drop_fw"] == 0 || drops["drop_fw_reject"] == 0 {
			t.Fatalf("drop reasons %v: want drop_fw and drop_fw_reject counted", drops)
		}
	})

	t.Run("a file with an error changes nothing", func(t *testing.T) {
		before := e.firewall(t)
		_, stderr, err := e.apply(t, "bad.yaml", `rules:
  - {name: fine, proto: tcp, dport: 22, action: allow}
  - {name: broken, proto: tcp, dport: 70000, action: drop}
`)
		if err == nil {
			t.Fatalf("a rule set with port 70000 applied")
		}
		if !strings.Contains(stderr, "rules[broken].dport") || !strings.Contains(stderr, "70000") {
			t.Fatalf("error %q does not name the rule and the field", stderr)
		}
		_, stderr, err = e.apply(t, "bad2.yaml", "rules:\n  - {name: x, action: drop, prot: tcp}\n")
		if err == nil || !strings.Contains(stderr, "prot") {
			t.Fatalf("unknown field: err %v, stderr %q", err, stderr)
		}
		after := e.firewall(t)
		if after.Generation != before.Generation || len(after.Rules) != len(before.Rules) {
			t.Fatalf("a failed apply changed the firewall: generation %d -> %d, %d -> %d rules",
				before.Generation, after.Generation, len(before.Rules), len(after.Rules))
		}
		if err := dial(c1, e.v4(0), 8081, time.Second); err == nil {
			t.Fatalf("port 8081 reachable after a failed apply")
		}
	})

	t.Run("single rules", func(t *testing.T) {
		e.n.mustXlane(nil, "fw", "rm", "closed")
		if err := dial(c1, e.v4(0), 8081, 2*time.Second); err != nil {
			t.Fatalf("port 8081 after fw rm closed: %v", err)
		}
		e.n.mustXlane(nil, "fw", "add", "closed-again", "--proto", "tcp", "--dport", "8081", "--action", "drop",
			"--scope", "network:blue", "--direction", "to-endpoint")
		if err := dial(c1, e.v4(0), 8081, time.Second); err == nil {
			t.Fatalf("port 8081 reachable after fw add")
		}
		e.n.mustXlane(nil, "fw", "update", "closed-again", "--dport", "9999")
		if err := dial(c1, e.v4(0), 8081, 2*time.Second); err != nil {
			t.Fatalf("port 8081 after fw update to 9999: %v", err)
		}
		var r api.FirewallRule
		e.n.mustXlane(&r, "fw", "get", "closed-again")
		if len(r.DstPort) != 1 || r.DstPort[0] != "9999" || r.Action != "drop" {
			t.Fatalf("fw get after update: %+v", r.Rule)
		}
		if _, _, err := e.n.xlane("fw", "add", "closed-again", "--action", "drop"); err == nil {
			t.Fatalf("adding a rule twice succeeded")
		}
		e.n.mustXlane(nil, "fw", "rm", "no-such-rule") // idempotent
		out, _, err := e.n.xlane("fw", "ls")
		if err != nil || !strings.Contains(out, "closed-again") || !strings.Contains(out, "PACKETS") {
			t.Fatalf("fw ls: %v\n%s", err, out)
		}
	})

	t.Run("export, diff, import", func(t *testing.T) {
		y, stderr, err := e.n.xlane("fw", "export")
		if err != nil {
			t.Fatalf("fw export: %v\n%s", err, stderr)
		}
		path := filepath.Join(e.dir, "exported.yaml")
		os.WriteFile(path, []byte(y), 0o600)
		out, stderr, err := e.n.xlane("fw", "diff", path)
		if err != nil || !strings.Contains(out, "no changes") {
			t.Fatalf("fw diff of the export: %v\n%s%s", err, out, stderr)
		}
		os.WriteFile(path, []byte(y+"  - {name: extra, proto: udp, dport: 9, action: drop}\n"), 0o600)
		gen := e.firewall(t).Generation
		out, _, err = e.n.xlane("fw", "diff", path)
		if err != nil || !strings.Contains(out, "+ extra") {
			t.Fatalf("fw diff with a new rule: %v\n%s", err, out)
		}
		if e.firewall(t).Generation != gen {
			t.Fatalf("fw diff changed the firewall")
		}
		saved := filepath.Join(e.dir, "iptables.rules")
		os.WriteFile(saved, []byte("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 23 -j DROP\n-A INPUT -m recent --rcheck -j DROP\nCOMMIT\n"), 0o600)
		out, stderr, err = e.n.xlane("fw", "import", saved)
		if err != nil || !strings.Contains(stderr, "line 4: not translated: module recent") || !strings.Contains(out, "name: input-1") {
			t.Fatalf("fw import: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
		}
	})

	t.Run("kill -9 and restart", func(t *testing.T) {
		before := e.firewall(t)
		e.n.stop(syscall.SIGKILL)
		// The pinned maps keep enforcing the rule set without a daemon.
		if err := dial(c2, e.v4(0), 8083, time.Second); err == nil {
			t.Fatalf("c2 -> 8083 connected while the daemon was down")
		}
		e.n.start()
		after := e.firewall(t)
		if len(after.Rules) != len(before.Rules) || !after.Enabled {
			t.Fatalf("after restart: %d rules (enabled %v), before %d", len(after.Rules), after.Enabled, len(before.Rules))
		}
		for i, r := range after.Rules {
			if r.Name != before.Rules[i].Name || r.Packets < before.Rules[i].Packets {
				t.Fatalf("rule %s after restart: %d packets, before %d", r.Name, r.Packets, before.Rules[i].Packets)
			}
		}
		if err := dial(c2, e.v4(0), 8083, time.Second); err == nil {
			t.Fatalf("c2 -> 8083 connected after the restart")
		}
	})
}

//	container c ---- node [xlaned --uplink up0, XDP] up0 ====== out0 [outside]
//	10.84.0.x                               192.0.2.2    192.0.2.1
//
// The uplink's DDoS defence and uplink-scope rules, with traffic from the
// outside to a container (routed, no NAT): a million-prefix blocklist
// loaded through the CLI, a per-source packet rate, and a rule that
// rejects a port (the outside sees its connection refused).
func TestFirewallUplink(t *testing.T) {
	var out string
	n := newNode(t, withOutside(&out, "1500"))
	n.mustXlane(nil, "network", "create", "up", "--subnet", "10.83.0.0/24", "--mode", "tc", "--masquerade=false", "--allow-unsolicited")
	c := newNetns(t, "c")
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "up", "--netns", c)
	dst := ep.IPs[0]
	ping(t, out, dst)
	listen(t, c, dst, 8080)
	listen(t, c, dst, 8081)
	if err := dial(out, dst, 8080, 2*time.Second); err != nil {
		t.Fatalf("outside -> container:8080 before any rule: %v", err)
	}
	drops := func() map[string]uint64 {
		var fw api.Firewall
		n.mustXlane(&fw, "fw", "ls")
		m := map[string]uint64{}
		for _, d := range fw.Drops {
			m[d.Reason] += d.Packets
		}
		return m
	}

	t.Run("blocklist of a million prefixes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "block.txt")
		var b strings.Builder
		for i := 0; i < 1_000_000; i++ {
			fmt.Fprintf(&b, "11.%d.%d.%d/32\n", i>>16&255, i>>8&255, i&255)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		var bl api.FirewallBlocklist
		n.mustXlane(&bl, "fw", "block", "load", path)
		if bl.Count != 1_000_000 {
			t.Fatalf("blocklist holds %d prefixes, want 1000000", bl.Count)
		}
		t.Logf("1,000,000 prefixes loaded through the CLI in %v", time.Since(begin).Round(time.Millisecond))
		// A source behind the outside (the node's gateway, which the
		// blocklist may not cover: it would cut the node off).
		runIn(t, out, "ip", "addr", "add", "198.51.100.7/32", "dev", "lo")
		pingFrom := func() error {
			return inNS(out, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-I", "198.51.100.7", dst.String()).Run()
		}
		if err := pingFrom(); err != nil { // the outside is not blocked
			t.Fatalf("ping from 198.51.100.7 before blocking it: %v", err)
		}
		n.mustXlane(nil, "fw", "block", "add", "198.51.100.0/24")
		if err := pingFrom(); err == nil {
			t.Fatalf("ping from a blocked source got through")
		}
		if d := drops()["drop_blocklist"]; d == 0 {
			t.Fatalf("no drop_blocklist counted")
		}
		ping(t, out, dst) // the gateway's own address is not blocked
		n.mustXlane(nil, "fw", "block", "rm", "198.51.100.0/24")
		if err := pingFrom(); err != nil {
			t.Fatalf("ping from 198.51.100.7 after unblocking it: %v", err)
		}
		n.mustXlane(nil, "fw", "block", "flush")
		n.mustXlane(&bl, "fw", "block", "ls")
		if bl.Count != 0 {
			t.Fatalf("blocklist holds %d prefixes after flush", bl.Count)
		}
	})

	t.Run("rate limit", func(t *testing.T) {
		n.mustXlane(nil, "fw", "ddos", "--pps", "10", "--burst", "10")
		o, _ := inNS(out, "ping", "-c", "100", "-i", "0.005", "-W", "1", dst.String()).CombinedOutput()
		got := 0
		for _, l := range strings.Split(string(o), "\n") {
			if strings.Contains(l, "bytes from") {
				got++
			}
		}
		// A bucket of 10 refilled at 10/s over ~0.5 s of pings.
		if got < 8 || got > 25 {
			t.Fatalf("%d of 100 pings answered under a 10/s limit (burst 10), want about 15:\n%s", got, o)
		}
		if d := drops()["drop_rate_limit"]; d == 0 {
			t.Fatalf("no drop_rate_limit counted")
		}
		n.mustXlane(nil, "fw", "ddos", "--off")
		ping(t, out, dst)
		t.Logf("%d of 100 pings at 200/s answered under a 10/s limit", got)
	})

	t.Run("uplink-scope reject", func(t *testing.T) {
		n.mustXlane(nil, "fw", "add", "no-8080", "--scope", "uplink", "--proto", "tcp", "--dport", "8080", "--action", "reject")
		begin := time.Now()
		err := dial(out, dst, 8080, 3*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(begin) > time.Second {
			t.Fatalf("outside -> container:8080 (rejected on the uplink): %v after %v, want refused at once", err, time.Since(begin))
		}
		if err := dial(out, dst, 8081, 2*time.Second); err != nil {
			t.Fatalf("outside -> container:8081 (no rule): %v", err)
		}
		if d := drops()["drop_fw_reject"]; d == 0 {
			t.Fatalf("no drop_fw_reject counted")
		}
	})
}
