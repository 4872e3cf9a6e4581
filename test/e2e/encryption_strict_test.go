package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestEncryptionFallback: two nodes with --encryption wireguard (the
// embedded engine), with and without --encryption-strict. Each node is
// given a wrong key for the other (xlane node update, in place), so no
// handshake can succeed; after the first handshake's grace:
//
//   - strict: n1's pod sends TCP and UDP with the payload's marker to
//     n2's pod: nothing arrives, a capture on the underlay bridge sees no
//     marker and no VXLAN packet, n1 counts drop_unencrypted on the
//     pod's endpoint, and status, node ls and the metrics say "dropped"
//     and why;
//   - not strict: the traffic falls back to the overlay in cleartext: a
//     SHA-256-checked transfer gets through, the capture finds the marker
//     and VXLAN packets (the fallback is real, not a report), and status
//     ("encryption fallback"), node ls and the metrics say "cleartext".
//
// The right keys back (xlane node update): the daemons' nudges make the
// handshakes without waiting for traffic, and a transfer is encrypted
// again (no marker on the underlay). Strict then rotates n1's key under a
// paced transfer (xlane node rotate-key, the new key given to n2 with
// node update): the transfer survives (SHA-256), the stall is measured,
// and nothing crosses the underlay in cleartext meanwhile.
func TestEncryptionFallback(t *testing.T) {
	for _, strict := range []bool{true, false} {
		name := "fallback"
		if strict {
			name = "strict"
		}
		t.Run(name, func(t *testing.T) { testEncryptionFallback(t, strict) })
	}
}

func testEncryptionFallback(t *testing.T, strict bool) {
	flags := []string{"--encryption", "wireguard", "--metrics-addr", metricsAddr}
	want := "cleartext"
	if strict {
		flags = append(flags, "--encryption-strict")
		want = "dropped"
	}
	cs := newCluster(t, "vxlan", []string{"tc", "tc"}, false, 1500, flags...)
	n1, n2 := cs[0], cs[1]
	waitSession(t, n1, "n2", "encrypted")
	waitSession(t, n2, "n1", "encrypted")
	// Wrong keys both ways (n2 is given n1's right key again: a fresh
	// peer, its old session gone).
	n1.mustXlane(nil, "node", "update", "n2", "--wg-public-key", otherKey(1))
	n2.mustXlane(nil, "node", "update", "n1", "--wg-public-key", otherKey(2))
	n2.mustXlane(nil, "node", "update", "n1", "--wg-public-key", n1.wgKey)
	p := waitSession(t, n1, "n2", want)
	if p.Reason != "no_handshake" || p.Detail == "" {
		t.Errorf("n1's peer n2: reason %q (%q), want no_handshake with words", p.Reason, p.Detail)
	}
	waitSession(t, n2, "n1", want)
	var st api.Status
	n1.mustXlane(&st, "status")
	if e := st.Cluster.Encryption; e.Strict != strict || (e.Cleartext == 1) == strict {
		t.Errorf("status encryption: strict %v, %d cleartext peers; want strict %v", e.Strict, e.Cleartext, strict)
	}
	out, _, err := n1.xlane("status")
	if wantLine := "encryption fallback:"; err != nil || strings.Contains(out, wantLine) == strict || !strings.Contains(out, "peer n2:") ||
		!strings.Contains(out, want) || !strings.Contains(out, "no_handshake") {
		t.Errorf("xlane status: %v\n%s\nwant n2 %s, no_handshake (and %q: %v)", err, out, want, wantLine, !strict)
	}
	if out, _, err := n1.xlane("node", "ls"); err != nil || !strings.Contains(out, want+" (") || !strings.Contains(out, "no_handshake") {
		t.Errorf("xlane node ls: %v\n%s\nwant n2 %s, no_handshake", err, out, want)
	}
	mfs := scrape(t, n1.node)
	if v := sample(mfs, "xlane_wireguard_peer_unencrypted", map[string]string{"node": "n2", "reason": "no_handshake", "state": want}); v != 1 {
		t.Errorf("xlane_wireguard_peer_unencrypted{node=n2,reason=no_handshake,state=%s} = %v, want 1", want, v)
	}
	if v := sample(mfs, "xlane_wireguard_peer_encrypted", map[string]string{"node": "n2"}); v != 0 {
		t.Errorf("xlane_wireguard_peer_encrypted{node=n2} = %v, want 0", v)
	}

	ul := startCapture(t, n1.ul, "br0")
	if strict {
		var before api.EndpointInfo
		n1.mustXlane(&before, "endpoint", "inspect", n1.ep.ID)
		sendCanaries(t, n1.pod, netip.AddrPortFrom(n2.ip4(), 7003), 20)
		sendCanaries(t, n1.pod, netip.AddrPortFrom(n2.ip6(), 7003), 20)
		if err := ns.WithNetNSPath(nsPath(n1.pod), func(ns.NetNS) error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(n2.ip4(), 7004).String(), 2*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}); err == nil {
			t.Errorf("a TCP connection to n2's pod opened without a WireGuard session, strict")
		}
		var after api.EndpointInfo
		n1.mustXlane(&after, "endpoint", "inspect", n1.ep.ID)
		if b, a := reason(before, "drop_unencrypted", "from_endpoint"), reason(after, "drop_unencrypted", "from_endpoint"); a.Packets < b.Packets+40 {
			t.Errorf("drop_unencrypted from n1's pod: %d before, %d after 40 datagrams and a SYN; want +41", b.Packets, a.Packets)
		}
		wire := ul()
		if hits := bytes.Count(wire.raw, []byte(canary)); hits != 0 || wire.udp[4789] != 0 {
			t.Errorf("strict, no session: the underlay carried %d hits of %q and %d VXLAN packets, want none", hits, canary, wire.udp[4789])
		}
		t.Logf("strict, no session: drop_unencrypted +%d; underlay UDP by port %v", reason(after, "drop_unencrypted", "from_endpoint").Packets-reason(before, "drop_unencrypted", "from_endpoint").Packets, wire.udp)
	} else {
		patternTransfer(t, n1.pod, n2.pod, netip.AddrPortFrom(n2.ip4(), 7001), 1<<20)
		patternTransfer(t, n2.pod, n1.pod, netip.AddrPortFrom(n1.ip6(), 7002), 1<<20)
		wire := ul()
		// (tcpdump sees the VXLAN device's GSO super-packets whole.)
		if hits := bytes.Count(wire.raw, []byte(canary)); hits < 100 || wire.udp[4789] < 10 {
			t.Errorf("fallback: the underlay carried %d hits of %q and %d VXLAN packets, want the transfers' in cleartext", hits, canary, wire.udp[4789])
		}
	}

	// The right keys: the sessions come back by themselves (nudges), and
	// the traffic is encrypted again.
	fixed := time.Now()
	n1.mustXlane(nil, "node", "update", "n2", "--wg-public-key", n2.wgKey)
	waitSession(t, n1, "n2", "encrypted")
	waitSession(t, n2, "n1", "encrypted")
	t.Logf("sessions back %v after the right key", time.Since(fixed).Round(time.Millisecond))
	ul = startCapture(t, n1.ul, "br0")
	patternTransfer(t, n1.pod, n2.pod, netip.AddrPortFrom(n2.ip4(), 7005), 1<<20)
	if wire := ul(); bytes.Count(wire.raw, []byte(canary)) != 0 || wire.udp[4789] != 0 || wire.udp[51871] < 100 {
		t.Errorf("with the right keys: %d marker hits, %d VXLAN and %d WireGuard packets on the underlay; want 0, 0, the transfer's",
			bytes.Count(wire.raw, []byte(canary)), wire.udp[4789], wire.udp[51871])
	}
	if strict {
		testRotateKey(t, n1, n2)
	}
}

// testRotateKey: n1 rotates its key under a paced transfer to n2's pod
// and n2 is given the new key a second later: the transfer survives
// (SHA-256), the stall (the longest ping gap or answer) is about that
// second, nothing crosses the underlay in cleartext, the sessions are
// made with the new key.
func testRotateKey(t *testing.T, n1, n2 *clusterNode) {
	t.Helper()
	ul := startCapture(t, n1.ul, "br0")
	probe := inNS(n1.pod, "ping", "-n", "-i", "0.05", "-W", "1", "-w", "12", n2.ip4().String())
	var pings bytes.Buffer
	probe.Stdout = &pings
	if err := probe.Start(); err != nil {
		t.Fatal(err)
	}
	wait := startTransfer(t, n1.pod, n2.pod, n2.ip4(), 16<<20, 2<<20)
	time.Sleep(2 * time.Second)
	var rotated api.EncryptionInfo
	start := time.Now()
	n1.mustXlane(&rotated, "node", "rotate-key")
	if rotated.PublicKey == "" || rotated.PublicKey == n1.wgKey {
		t.Fatalf("rotate-key: public key %q, want a new one (was %s)", rotated.PublicKey, n1.wgKey)
	}
	// An operator's second to carry the key to the peer: n1's traffic to
	// n2 waits in WireGuard meanwhile (within the grace: strict drops
	// nothing).
	time.Sleep(time.Second)
	n2.mustXlane(nil, "node", "update", "n1", "--wg-public-key", rotated.PublicKey)
	given := time.Since(start)
	t.Logf("rotated, and given to the peer %v later", given.Round(time.Millisecond))
	wait()
	probe.Wait()
	gap, slowest := longestPingGap(pings.String()), slowestPing(pings.String())
	t.Logf("rotation under a 2 MiB/s transfer: longest gap between answered pings (every 50 ms): %v, slowest answer %v", gap, slowest)
	// The stall: about the time the peer went without the new key (less
	// the commands' own time, within "given"). That the key did change
	// shows below: the sessions are made again with the new key only.
	if gap > given+2*time.Second || slowest > given+2*time.Second {
		t.Errorf("rotation stalled the traffic %v (slowest answer %v), want under %v (the key given %v after the rotation, and 2 s)\n%s",
			gap, slowest, given+2*time.Second, given, pings.String())
	}
	if wire := ul(); wire.udp[4789] != 0 {
		t.Errorf("during the rotation the underlay carried %d cleartext VXLAN packets", wire.udp[4789])
	}
	waitSession(t, n1, "n2", "encrypted")
	waitSession(t, n2, "n1", "encrypted")
	var nodes []model.Node
	n1.mustXlane(&nodes, "node", "ls")
	for _, n := range nodes {
		if n.Name == "n1" && n.WGPublicKey != rotated.PublicKey {
			t.Errorf("n1's own record: key %s, want the new %s", n.WGPublicKey, rotated.PublicKey)
		}
	}
	n1.wgKey = rotated.PublicKey
	// Bad input: nothing applied, the field named.
	for _, tc := range []struct{ node, key, want string }{
		{"n1", n2.wgKey, "wg_public_key"},                                            // this node's own record
		{"n2", "not-a-key", "wg_public_key"},                                         // malformed
		{"n2", rotated.PublicKey, "wg_public_key"},                                   // this node's own key
		{"n3", n2.wgKey, "not found"},                                                // no such node
		{"n2", base64.StdEncoding.EncodeToString(make([]byte, 32)), "wg_public_key"}, // all zero
	} {
		if _, stderr, err := n1.xlane("node", "update", tc.node, "--wg-public-key", tc.key); err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("node update %s --wg-public-key %q: %v, %q; want an error naming %s", tc.node, tc.key, err, stderr, tc.want)
		}
	}
	// Nothing of them applied: the records' keys and the session are as
	// they were.
	n1.mustXlane(&nodes, "node", "ls")
	for _, n := range nodes {
		if want := map[string]string{"n1": rotated.PublicKey, "n2": n2.wgKey}[n.Name]; n.WGPublicKey != want {
			t.Errorf("after the refused updates node %s has key %s, want %s", n.Name, n.WGPublicKey, want)
		}
	}
	waitSession(t, n1, "n2", "encrypted")
}

// slowestPing is the longest round trip in ping's output.
func slowestPing(out string) time.Duration {
	var slowest time.Duration
	for _, l := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(l, "time=")
		if !ok {
			continue
		}
		var ms float64
		if _, err := fmt.Sscan(strings.TrimSuffix(strings.Fields(rest)[0], "ms"), &ms); err == nil {
			slowest = max(slowest, time.Duration(ms*float64(time.Millisecond)))
		}
	}
	return slowest
}

// waitSession waits until c's peer node's session is in state.
func waitSession(t *testing.T, c *clusterNode, node, state string) api.EncryptionPeer {
	t.Helper()
	var st api.Status
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c.mustXlane(&st, "status")
		for _, p := range st.Cluster.Encryption.Peers {
			if p.Node == node && p.State == state {
				return p
			}
		}
	}
	t.Fatalf("%s: peer %s's session never %s: %+v", c.name, node, state, st.Cluster.Encryption)
	return api.EncryptionPeer{}
}

// otherKey is a valid public key no node has.
func otherKey(i byte) string {
	k := make([]byte, 32)
	for j := range k {
		k[j] = i + byte(j)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// sendCanaries sends n UDP datagrams carrying the payload's marker from
// netns to addr.
func sendCanaries(t *testing.T, netns string, addr netip.AddrPort, n int) {
	t.Helper()
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		c, err := net.Dial("udp", addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range n {
			c.Write([]byte(fmt.Sprintf("%s%08d", canary, i)))
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send to %s: %v", addr, err)
	}
}
