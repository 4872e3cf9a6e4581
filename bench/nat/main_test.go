package main

import (
	"net/netip"
	"strings"
	"testing"
)

// kube-proxy's large cluster mode: above 1,000 endpoints the endpoint
// chains' rules and the jumps to them lose their comments (what keeps a
// legacy table of 100,000 services under the kernel's 512 MiB); the
// service rules keep theirs, and no rule is lost.
func TestKubeProxyRulesLargeCluster(t *testing.T) {
	n := &natNode{backendIPs: []netip.Addr{netip.MustParseAddr("10.180.0.11"),
		netip.MustParseAddr("10.180.0.12"), netip.MustParseAddr("10.180.0.13")}}
	rules := func(count int) []string {
		var svcs []natSvc
		for i := 0; i < count; i++ {
			svcs = append(svcs, n.svc(i))
		}
		var out []string
		for _, l := range strings.Split(kubeProxyRules(svcs, "10.180.0.0/24"), "\n") {
			if strings.HasPrefix(l, "-A KUBE-S") { // KUBE-SERVICES, KUBE-SVC-*, KUBE-SEP-*
				out = append(out, l)
			}
		}
		return out
	}
	for _, c := range []struct {
		svcs  int
		large bool
	}{{1, false}, {333, false}, {334, true}, {2000, true}} {
		rs := rules(c.svcs)
		if want := 11*c.svcs + 1; len(rs) != want { // + the nodeports jump
			t.Errorf("%d services: %d rules, want %d", c.svcs, len(rs), want)
		}
		for _, r := range rs {
			endpointRule := strings.HasPrefix(r, "-A KUBE-SEP-") || strings.Contains(r, "-j KUBE-SEP-")
			commented := strings.Contains(r, "-m comment")
			if endpointRule && commented == c.large || !endpointRule && !commented {
				t.Fatalf("%d services (large cluster mode %v): %s", c.svcs, c.large, r)
			}
		}
	}
}

func TestParseNATFlagsLegacyTable(t *testing.T) {
	if _, err := parseNATFlags([]string{"-levels", "1,100000"}); err != nil {
		t.Fatalf("100,000 services beside iptables-legacy: %v", err)
	}
	_, err := parseNATFlags([]string{"-levels", "1,200000"})
	if err == nil || !strings.Contains(err.Error(), "iptables-legacy") {
		t.Fatalf("200,000 services with iptables-legacy: %v, want an error naming it", err)
	}
	if _, err := parseNATFlags([]string{"-levels", "1,200000", "-modes", "xlane,iptables-nft"}); err != nil {
		t.Fatalf("200,000 services without iptables-legacy: %v", err)
	}
}
