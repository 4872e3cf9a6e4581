package e2e

import (
	"bytes"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestEncryptionNode: the nodes' own traffic (xlaned --encryption-node,
// docs/encryption.md "Node traffic"). Two nodes with --encryption
// wireguard (the embedded engine), without and then with
// --encryption-node; each time SHA-256-checked transfers of canary-marked
// payloads between the nodes' own underlay addresses (IPv4 one way, IPv6
// the other) while tcpdump captures the underlay bridge:
//
//   - without: the capture finds the canary (the search works, and the
//     node traffic was in cleartext);
//   - with: zero hits, WireGuard packets on the bridge and the canary
//     inside n1's xlwg0; the control traffic that stays clear does: the
//     peer probes (ICMP echo) are on the bridge and the peers stay up;
//     status says "node traffic".
//
// A restart of n1's xlaned keeps one set of rules. Then n2's xlaned stops
// (the embedded device goes): n2's node traffic to n1 is refused (the unreachable route of table 121), never sent in
// cleartext; --uninstall removes the rules and the table.
func TestEncryptionNode(t *testing.T) {
	for _, on := range []bool{false, true} {
		name := "without"
		if on {
			name = "with"
		}
		t.Run(name, func(t *testing.T) { testEncryptionNode(t, on) })
	}
}

func testEncryptionNode(t *testing.T, on bool) {
	flags := []string{"--encryption", "wireguard"}
	if on {
		flags = append(flags, "--encryption-node")
	}
	cs := newCluster(t, "vxlan", []string{"tc", "tc"}, false, 1500, flags...)
	n1, n2 := cs[0], cs[1]
	waitSession(t, n1, "n2", "encrypted")
	waitSession(t, n2, "n1", "encrypted")

	ul := startCapture(t, n1.ul, "br0")
	var wg func() wgCapture
	if on {
		wg = startCapture(t, n1.netns, "xlwg0")
	}
	patternTransfer(t, n1.netns, n2.netns, netip.AddrPortFrom(n2.under4, 7101), 1<<20)
	patternTransfer(t, n2.netns, n1.netns, netip.AddrPortFrom(n1.under6, 7102), 1<<20)
	// The peer probes (1 s) cross meanwhile: at least one exchange.
	time.Sleep(1500 * time.Millisecond)
	wire := ul()
	hits := bytes.Count(wire.raw, []byte(canary))
	icmp := countPackets(t, wire, "icmp")
	t.Logf("node traffic, --encryption-node %v: %d canary hits on the underlay, UDP by port %v, %d ICMP echo packets", on, hits, wire.udp, icmp)
	if !on {
		if hits == 0 {
			t.Fatalf("without --encryption-node the underlay capture has no hit of %q: the search does not work", canary)
		}
		return
	}
	if hits != 0 {
		t.Errorf("--encryption-node: the underlay carried %d hits of %q, want none", hits, canary)
	}
	if wire.udp[51871] < 100 {
		t.Errorf("--encryption-node: %d WireGuard packets on the underlay, want the transfers' (>= 100)", wire.udp[51871])
	}
	if inside := wg(); bytes.Count(inside.raw, []byte(canary)) == 0 {
		t.Errorf("--encryption-node: no canary inside n1's xlwg0: the node traffic did not go through WireGuard")
	}
	if icmp == 0 {
		t.Errorf("--encryption-node: no ICMP echo (the peer probes, left clear) on the underlay")
	}
	var st api.Status
	n1.mustXlane(&st, "status")
	if e := st.Cluster.Encryption; !e.Node {
		t.Errorf("status encryption: node_traffic false, want true")
	}
	if out, _, err := n1.xlane("status"); err != nil || !strings.Contains(out, "node traffic") {
		t.Errorf("xlane status: %v\n%s\nwant \"node traffic\"", err, out)
	}
	if out, _, err := n1.xlane("node", "ls"); err != nil || strings.Contains(out, "down") {
		t.Errorf("xlane node ls: %v\n%s\nwant the peer up (the probes cross in clear)", err, out)
	}

	// A restart keeps the rules as they are: one set, none lost.
	n1.stop(syscall.SIGTERM)
	n1.start()
	if out := runIn(t, n1.netns, "ip", "rule", "show"); strings.Count(out, "lookup 121") != 1 || strings.Count(out, "ipproto") != 2 {
		t.Errorf("n1's rules after a restart, want one table rule and two exclusions (ICMP, the VXLAN port):\n%s", out)
	}
	waitSession(t, n1, "n2", "encrypted")

	n2.stop(syscall.SIGTERM)
	if out := runIn(t, n2.netns, "ip", "route", "show", "table", "121"); !strings.Contains(out, "unreachable "+n1.under4.String()) {
		t.Errorf("with xlaned stopped (the embedded device gone) n1's underlay address is not unreachable in table 121:\n%s", out)
	}
	err := ns.WithNetNSPath(nsPath(n2.netns), func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(n1.under4, 7103).String(), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "no route to host") {
		t.Errorf("n2's node traffic to n1 with n2's device gone: %v, want no route to host", err)
	}
	cmd := inNS(n2.netns, filepath.Join(binDir, "xlaned"), "--state", filepath.Join(n2.dir, "state.db"), "--socket", n2.socket,
		"--pin-dir", n2.pinDir, "--docker-plugin-socket=", "--calibrate-at-start=false", "--uninstall")
	if out, err := runWithTimeout(cmd, startTimeout()); err != nil {
		t.Fatalf("xlaned --uninstall: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"ip", "rule", "show"}, {"ip", "-6", "rule", "show"}} {
		if out := runIn(t, n2.netns, args...); strings.Contains(out, "lookup 121") || strings.Contains(out, "ipproto") {
			t.Errorf("rules left after uninstall:\n%s", out)
		}
	}
	if out := runIn(t, n2.netns, "ip", "route", "show", "table", "121"); out != "" {
		t.Errorf("table 121 left after uninstall:\n%s", out)
	}
}

// countPackets counts a capture's packets matching a tcpdump filter.
func countPackets(t *testing.T, c wgCapture, filter string) int {
	t.Helper()
	out, err := exec.Command("tcpdump", "-r", c.path, "-n", "-q", filter).Output()
	if err != nil {
		t.Fatalf("tcpdump -r %s %s: %v", c.path, filter, err)
	}
	return strings.Count(string(out), "\n")
}

// TestEncryptionIPv6Underlay: the nodes know each other by IPv6 underlay
// addresses only (WireGuard over IPv6, 80 bytes of overhead), with
// --encryption-node: SHA-256-checked transfers pod to pod (IPv4 and IPv6
// inside), node to node (the IPv6 underlay addresses) and through a
// ClusterIP on n1 to its backend, n2's pod, while the
// underlay bridge is captured: zero hits of the marker, the traffic in
// WireGuard over IPv6, and the pods' MTU the underlay's less WireGuard's
// IPv6 overhead and VXLAN's.
func TestEncryptionIPv6Underlay(t *testing.T) {
	cs := newCluster(t, "vxlan", []string{"tc", "tc"}, true, 1500, "--encryption", "wireguard", "--encryption-node")
	n1, n2 := cs[0], cs[1]
	waitSession(t, n1, "n2", "encrypted")
	waitSession(t, n2, "n1", "encrypted")
	var st api.Status
	n1.mustXlane(&st, "status")
	if want := n2.under6.String(); len(st.Cluster.Encryption.Peers) != 1 || !strings.HasPrefix(st.Cluster.Encryption.Peers[0].Endpoint, "["+want+"]") {
		t.Fatalf("n1's peers %+v, want n2 at [%s]", st.Cluster.Encryption.Peers, want)
	}
	if mtu := st.Cluster.MTU; mtu != 1500-80-50 {
		t.Errorf("pod MTU %d over an IPv6 underlay, want %d (1500 - WireGuard's 80 - VXLAN's 50)", mtu, 1500-80-50)
	}
	ul := startCapture(t, n1.ul, "br0")
	patternTransfer(t, n1.pod, n2.pod, netip.AddrPortFrom(n2.ip4(), 7201), 1<<20)
	patternTransfer(t, n2.pod, n1.pod, netip.AddrPortFrom(n1.ip6(), 7202), 1<<20)
	patternTransfer(t, n1.netns, n2.netns, netip.AddrPortFrom(n2.under6, 7203), 1<<20)
	// A ClusterIP on n1 whose backend is n2's pod: DNAT on n1, the
	// tunnel, the replies translated back on the way in.
	vip, backend := netip.MustParseAddrPort("10.96.0.77:7204"), netip.AddrPortFrom(n2.ip4(), 7204)
	n1.mustXlane(nil, "service", "create", "enc", "--vip", vip.String(), "--backend", backend.String())
	patternTransferVia(t, n1.pod, n2.pod, backend, vip, 1<<20)
	wire := ul()
	hits := bytes.Count(wire.raw, []byte(canary))
	wg6 := countPackets(t, wire, "ip6 and udp port 51871")
	t.Logf("IPv6 underlay: %d canary hits, UDP by port %v, %d WireGuard packets over IPv6", hits, wire.udp, wg6)
	if hits != 0 || wire.udp[4789] != 0 {
		t.Errorf("the underlay carried %d hits of %q and %d VXLAN packets, want none", hits, canary, wire.udp[4789])
	}
	if wg6 < 100 {
		t.Errorf("%d WireGuard packets over IPv6 on the underlay, want the transfers' (>= 100)", wg6)
	}
}
