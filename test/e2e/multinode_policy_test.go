package e2e

import (
	"fmt"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// Network policy across nodes (docs/multinode.md): a packet from the
// overlay carries its network in the VNI, and xlane_from_overlay holds ICC
// off and isolation for it as the endpoint programs do on one node.
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
	var q, iso [2]string
	var qEP, isoEP [2]api.EndpointInfo
	for i, c := range cs {
		q[i], qEP[i] = pod(c, i, 0, "quiet", "--icc=false")
		iso[i], isoEP[i] = pod(c, i, 1, "iso", "--isolated")
	}
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
