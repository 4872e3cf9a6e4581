package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// Network policy across nodes (docs/multinode.md): a packet from the
// overlay carries its network in the VNI, and xlane_from_overlay holds ICC
// off and isolation for it as the endpoint programs do on one node. Also
// the MTU a peer's record declares.
//
//	n1: quiet (--icc=false) q1   iso (--isolated) i1   open o1
//	n2: quiet               q2   iso              i2
func TestMultiNodePolicy(t *testing.T) {
	cs := newNodePair(t)
	pod := func(c *clusterNode, i, k int, network string, flags ...string) (string, api.EndpointInfo) {
		args := append([]string{"network", "create", network, "--mode", "tc",
			"--subnet", fmt.Sprintf("10.244.%d.%d/26", i+1, 64*k), "--subnet", fmt.Sprintf("fd00:244:0:%d:%d::/80", i+1, k)}, flags...)
		c.mustXlane(nil, args...)
		ns := newNetns(t, "pod")
		var ep api.EndpointInfo
		c.mustXlane(&ep, "endpoint", "add", network, "--netns", ns)
		return ns, ep
	}
	// MTU mismatch: n1 is told of a third node whose underlay's MTU is
	// 1400: its networks take 1350 by default, and refuse more.
	cs[0].mustXlane(nil, "node", "add", "n3", "--underlay", "192.168.77.3", "--pod-cidr", "10.244.3.0/24", "--mtu", "1400")
	var q, iso [2]string
	var qEP, isoEP [2]api.EndpointInfo
	for i, c := range cs {
		q[i], qEP[i] = pod(c, i, 0, "quiet", "--icc=false")
		iso[i], isoEP[i] = pod(c, i, 1, "iso", "--isolated")
	}
	t.Run("mtu mismatch", func(t *testing.T) {
		for i, want := range []int{1350, 1450} {
			var net api.NetworkInfo
			cs[i].mustXlane(&net, "network", "inspect", "quiet")
			if net.MTU != want {
				t.Errorf("n%d: network MTU %d, want %d", i+1, net.MTU, want)
			}
		}
		_, stderr, err := cs[0].xlane("network", "create", "big", "--mode", "tc", "--mtu", "1450", "--subnet", "10.244.1.192/26")
		if err == nil || !strings.Contains(stderr, "mtu") {
			t.Errorf("network create --mtu 1450 with a 1400-MTU peer: err %v, stderr %q; want an error naming mtu", err, stderr)
		}
		if _, _, err := cs[0].xlane("network", "inspect", "big"); err == nil {
			t.Error("the refused network exists")
		}
		cs[0].mustXlane(nil, "node", "rm", "n3")
	})
	t.Run("pmtu", func(t *testing.T) {
		// Pods whose MTU (1500) is more than the overlay carries (1450):
		// a too-large packet goes to Linux (pass_too_big), which sends
		// the sender its ICMP error; TCP then sizes its segments by it.
		var big [2]string
		var bigEP [2]api.EndpointInfo
		for i, c := range cs {
			big[i], bigEP[i] = pod(c, i, 3, "big", "--mtu", "1500")
		}
		for _, dst := range bigEP[1].IPs {
			size, want := "1472", "mtu = 1450"
			if dst.Is6() {
				size, want = "1452", "mtu=1450"
			}
			out, err := inNS(big[0], "ping", "-c", "1", "-W", "2", "-M", "do", "-s", size, dst.String()).CombinedOutput()
			if err == nil || !strings.Contains(strings.ReplaceAll(string(out), "mtu = ", "mtu="), strings.ReplaceAll(want, "mtu = ", "mtu=")) {
				t.Errorf("ping -M do -s %s %s from a 1500-MTU pod over a 1450-MTU overlay: %v\n%s\nwant the ICMP error saying mtu 1450", size, dst, err, out)
			}
		}
		var ep api.EndpointInfo
		cs[0].mustXlane(&ep, "endpoint", "inspect", bigEP[0].ID)
		if c := reason(ep, "pass_too_big", "from_endpoint"); c.Packets < 2 {
			t.Errorf("pass_too_big from %s = %d, want the 2 pings; counters %+v", ep.ID, c.Packets, ep.Reasons)
		}
		transfer(t, big[0], big[1], bigEP[1].IPs[0], 4<<20)
		transfer(t, big[0], big[1], bigEP[1].IPs[1], 4<<20)
	})
	open, _ := pod(cs[0], 0, 2, "open")
	refused := func(t *testing.T, from string, to api.EndpointInfo, reason string) {
		t.Helper()
		before := uplinkCounter(t, cs[1], "xlvx0", reason)
		for _, a := range to.IPs {
			if out, err := inNS(from, "ping", "-c", "1", "-W", "1", a.String()).CombinedOutput(); err == nil {
				t.Errorf("ping %s went through:\n%s", a, out)
			}
		}
		if n := uplinkCounter(t, cs[1], "xlvx0", reason); n < before+uint64(len(to.IPs)) {
			t.Errorf("%s on n2's VXLAN device: %d, want at least %d", reason, n, before+uint64(len(to.IPs)))
		}
	}
	t.Run("icc off", func(t *testing.T) {
		refused(t, q[0], qEP[1], "drop_icc")
	})
	t.Run("isolated", func(t *testing.T) {
		// The isolated network's pods reach each other across nodes ...
		for _, a := range isoEP[1].IPs {
			ping(t, iso[0], a)
		}
		transfer(t, iso[0], iso[1], isoEP[1].IPs[0], 4<<20)
		transfer(t, iso[1], iso[0], isoEP[0].IPs[1], 4<<20)
		// ... and no other network's.
		refused(t, open, isoEP[1], "drop_vni")
		refused(t, q[0], isoEP[1], "drop_vni")
	})
}
