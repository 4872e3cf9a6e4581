package e2e

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestDockerPolicyLabels: Docker containers get labels for standalone
// ClusterNetworkPolicies through endpoint driver options (`docker run
// --network name=NET,driver-opt=xlane.label.app=web`, a real dockerd), and
// a policy selecting them by those labels holds: an Admin Deny of
// app=client into app=web's port 80 denies c1 (app=client) and lets c3
// (no label) in.
func TestDockerPolicyLabels(t *testing.T) {
	h := newDockerHost(t)
	n := h.n
	h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.94.0.0/24", "labeled")
	c1 := h.run("c1", "--network", "name=labeled,driver-opt=xlane.label.app=client")
	c2 := h.run("c2", "--network", "name=labeled,driver-opt=xlane.label.app=web,driver-opt=xlane.label.team=a")
	c3 := h.run("c3", "--network", "labeled")
	for _, c := range []struct {
		ctr  string
		want map[string]string
	}{{c1, map[string]string{"app": "client"}}, {c2, map[string]string{"app": "web", "team": "a"}}, {c3, nil}} {
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", h.attachment(c.ctr, "labeled").EndpointID)
		if len(ep.Labels) != len(c.want) {
			t.Fatalf("%s: labels %v, want %v", c.ctr, ep.Labels, c.want)
		}
		for k, v := range c.want {
			if ep.Labels[k] != v {
				t.Fatalf("%s: labels %v, want %v", c.ctr, ep.Labels, c.want)
			}
		}
	}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, []byte(`apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: no-client-to-web}
spec:
  tier: Admin
  priority: 1
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: web, team: a}}}}
  ingress:
  - {action: Deny, from: [{pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: client}}}}], protocols: [{tcp: {destinationPort: {number: 80}}}]}
`))
	n.mustXlane(nil, "policy", "apply", "-f", file)
	ns1, ns2, ns3 := h.ns(c1), h.ns(c2), h.ns(c3)
	web := netip.AddrPortFrom(h.attachment(c2, "labeled").v4(), 80)
	noTCP(t, ns1, ns2, web)
	ln := listenIn(t, ns2, web)
	acceptAndClose(ln)
	if err := dialOnce(ns3, web); err != nil {
		t.Errorf("c3 (no label) to c2:80: %v, want allowed", err)
	}
	ln.Close()
}
