package e2e

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestEncryptionStrictReceive: strict mode on the receiving side
// (bpf/tc_overlay.c overlay_unencrypted). n1 runs --encryption-strict, n2
// not. While their session works, n2's pod reaches n1's pod (through
// WireGuard: accepted). Then n2 is given a wrong key for n1: no session,
// n2 falls back to cleartext VXLAN to n1's underlay address (the capture
// on the underlay bridge sees the canaries), and n1 drops all of it on
// the way in: n1's pod receives none, n1 counts drop_unencrypted on the
// overlay device.
func TestEncryptionStrictReceive(t *testing.T) {
	cs := newCluster(t, "vxlan", []string{"tc", "tc"}, false, 1500, "--encryption", "wireguard", "--metrics-addr", metricsAddr)
	n1, n2 := cs[0], cs[1]
	n1.stop(syscall.SIGTERM)
	n1.flags = append(n1.flags, "--encryption-strict")
	n1.start()
	var st api.Status
	n1.mustXlane(&st, "status")
	if !st.Cluster.Encryption.Strict {
		t.Fatalf("n1 restarted with --encryption-strict: status says not strict")
	}
	waitSession(t, n1, "n2", "encrypted")
	waitSession(t, n2, "n1", "encrypted")

	var got atomic.Int64
	dst := netip.AddrPortFrom(n1.ip4(), 7005)
	err := ns.WithNetNSPath(nsPath(n1.pod), func(ns.NetNS) error {
		c, err := net.ListenPacket("udp", dst.String())
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, _, err := c.ReadFrom(buf)
				if err != nil {
					return
				}
				if bytes.Contains(buf[:n], []byte(canary)) {
					got.Add(1)
				}
			}
		}()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sendCanaries(t, n2.pod, dst, 20)
	time.Sleep(200 * time.Millisecond)
	if n := got.Load(); n < 15 {
		t.Fatalf("through WireGuard n1's pod received %d of 20 datagrams from n2's pod, want them (strict accepts what WireGuard carried)", n)
	}

	n2.mustXlane(nil, "node", "update", "n1", "--wg-public-key", otherKey(3))
	waitSession(t, n2, "n1", "cleartext")
	before := dropUnencrypted(t, n1)
	got.Store(0)
	ul := startCapture(t, n1.ul, "br0")
	sendCanaries(t, n2.pod, dst, 20)
	time.Sleep(200 * time.Millisecond)
	wire := ul()
	hits := bytes.Count(wire.raw, []byte(canary))
	after := dropUnencrypted(t, n1)
	t.Logf("n2's cleartext fallback to strict n1: %d canary hits and %d VXLAN packets on the underlay, n1's pod received %d, drop_unencrypted +%v on the way in",
		hits, wire.udp[4789], got.Load(), after-before)
	if hits == 0 || wire.udp[4789] == 0 {
		t.Fatalf("n2 fell back to cleartext but the underlay carried %d canary hits and %d VXLAN packets: the test sent nothing in cleartext", hits, wire.udp[4789])
	}
	if n := got.Load(); n != 0 {
		t.Errorf("strict n1's pod received %d cleartext datagrams from n2's pod, want none", n)
	}
	if after-before < 20 {
		t.Errorf("n1's drop_unencrypted on the way in: +%v, want +20", after-before)
	}
	if out, _, err := n1.xlane("status"); err != nil || !strings.Contains(out, "strict") {
		t.Errorf("xlane status: %v\n%s", err, out)
	}
}

// dropUnencrypted is n's xlane_drop_total{reason="drop_unencrypted",
// device="overlay"}: counted on the way in from the overlay.
func dropUnencrypted(t *testing.T, n *clusterNode) float64 {
	t.Helper()
	return sample(scrape(t, n.node), "xlane_drop_total", map[string]string{"reason": "drop_unencrypted", "device": "overlay"})
}
