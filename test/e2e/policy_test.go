package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/xlane-dev/xlane/internal/api"
)

//	 node netns (xlaned)        endpoint netns (network pol, 10.96.0.0/24, fd00:96::/64)
//	+-----------------------+  +--------------------------------------------+
//	| xlane policy apply -f |  | client .2 app=client                       |
//	| xlane fw apply (tier  |  | web    .3 app=web: :8080 :8081 :8082       |
//	|  between the two)     |  | other  .4 app=other: :8080                 |
//	|                       |  | dns    .5 app=dns: CoreDNS, ext.test -> .6 |
//	|                       |  |           and fd00:96::6 (AAAA)            |
//	|                       |  | ext    .6 app=ext: [::]:8080               |
//	+-----------------------+  +--------------------------------------------+
//
// Standalone ClusterNetworkPolicies with real traffic: the node's own rule
// of the middle tier (priority 50000) allows what reaches web, dns and
// ext; an Admin Deny of web's 8081 beats it; an Admin Pass of the
// client's 8082 skips a later Admin Deny of 8082 and the middle tier
// allows it (another endpoint is denied); the Baseline tier's default deny
// decides only where nothing else did (other's 8080); a domainNames egress
// peer allows ext's address to the client once the client resolved
// ext.test through CoreDNS, and an Admin Deny of ext's address denies it
// before; the same for its IPv6 address and the AAAA answer (asked over
// IPv6). Then: deleting the Baseline policy opens other's 8080; an
// endpoint added later with app=web gets the Admin Deny within the
// feature's recompile; a file with an invalid document among valid ones
// applies none (the error names the document and the field), and 1,000
// policies apply in one request (timed).
func TestPolicyStandalone(t *testing.T) {
	coredns := corednsBinary(t)
	n := newNode(t)
	requireMode(t, n, "tc")
	n.mustXlane(nil, "network", "create", "pol", "--subnet", "10.96.0.0/24", "--subnet", "fd00:96::/64", "--mode", "tc")
	names := []string{"client", "web", "other", "dns", "ext"}
	cs := map[string]string{}
	addrs, addrs6 := map[string]netip.Addr{}, map[string]netip.Addr{}
	for _, name := range names {
		c := newNetns(t, "po")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "pol", "--netns", c, "--label", "app="+name)
		if ep.Labels["app"] != name {
			t.Fatalf("endpoint %s: labels %v, want app=%s", ep.ID, ep.Labels, name)
		}
		if len(ep.IPs) != 2 {
			t.Fatalf("endpoint %s: addresses %v, want one of each family", ep.ID, ep.IPs)
		}
		cs[name], addrs[name], addrs6[name] = c, ep.IPs[0], ep.IPs[1]
	}
	if addrs["ext"].String() != "10.96.0.6" || addrs6["ext"].String() != "fd00:96::6" {
		t.Fatalf("ext is %v %v: the Corefile names 10.96.0.6 and fd00:96::6", addrs["ext"], addrs6["ext"])
	}
	if _, stderr, err := n.xlane("endpoint", "add", "pol", "--netns", newNetns(t, "po"), "--label", "app=bad value"); err == nil || !strings.Contains(stderr, "labels.app") {
		t.Errorf("endpoint add with label value %q: %v %s, want refused naming labels.app", "bad value", err, stderr)
	}

	dir := t.TempDir()
	startCoreDNS(t, coredns, cs["dns"], "ext.test:53 {\n    hosts {\n        10.96.0.6 ext.test\n        fd00:96::6 ext.test\n        ttl 60\n    }\n}\n")
	for _, s := range []struct {
		name  string
		ports []uint16
	}{{"web", []uint16{8080, 8081, 8082}}, {"other", []uint16{8080}}} {
		for _, p := range s.ports {
			echoServer(t, cs[s.name], netip.AddrPortFrom(netip.IPv4Unspecified(), p))
		}
	}
	echoServer(t, cs["ext"], netip.AddrPortFrom(netip.IPv6Unspecified(), 8080)) // both families

	// The middle tier: the node's own rule, between the Admin tier
	// (10000-42024) and the Baseline tier (60000-92024).
	writeFile(t, filepath.Join(dir, "rules.yaml"), []byte(fmt.Sprintf(
		"rules:\n  - {name: apps, priority: 50000, direction: to-endpoint, dst: [%s, %s, %s, %s, %s], action: allow}\n",
		addrs["web"], addrs["dns"], addrs["ext"], addrs6["dns"], addrs6["ext"])))
	if _, stderr, err := n.xlane("fw", "apply", filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatalf("xlane fw apply: %v\n%s", err, stderr)
	}
	policies := `apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-no-8081}
spec:
  tier: Admin
  priority: 10
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}}
  ingress:
  - {name: no-8081, action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 8081}}}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: client-pass-8082}
spec:
  tier: Admin
  priority: 5
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}}
  ingress:
  - {action: Pass, from: [{pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: client}}}}], protocols: [{tcp: {destinationPort: {number: 8082}}}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-no-8082}
spec:
  tier: Admin
  priority: 20
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}}
  ingress:
  - {action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 8082}}}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: client-egress}
spec:
  tier: Admin
  priority: 30
  subject: {pods: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: pol}}, podSelector: {matchLabels: {app: client}}}}
  egress:
  - {name: dns, action: Accept, to: [{pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: dns}}}}], protocols: [{udp: {destinationPort: {number: 53}}}]}
  - {name: ext-by-name, action: Accept, to: [{domainNames: [ext.test]}], protocols: [{tcp: {destinationPort: {number: 8080}}}]}
  - {name: not-ext, action: Deny, to: [{networks: [10.96.0.6/32, "fd00:96::6/128"]}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: default-deny}
spec:
  tier: Baseline
  priority: 0
  subject: {namespaces: {}}
  ingress:
  - {action: Deny, from: [{namespaces: {}}]}
`
	file := filepath.Join(dir, "policies.yaml")
	writeFile(t, file, []byte(policies))
	var applied api.PolicyApplied
	n.mustXlane(&applied, "policy", "apply", "-f", file)
	if !applied.Applied || len(applied.Created) != 5 {
		t.Fatalf("policy apply: %+v, want 5 created", applied)
	}
	// The taps for domainNames open within a second (fqdn.syncInterval).
	time.Sleep(1500 * time.Millisecond)

	allow := func(from, to string, port uint16) {
		t.Helper()
		c, err := dialIn(cs[from], netip.AddrPortFrom(addrs[to], port), 5*time.Second)
		if err != nil {
			t.Fatalf("%s -> %s:%d: %v, want allowed", from, to, port, err)
		}
		echo(t, c, fmt.Sprintf("%s -> %s:%d", from, to, port))
		c.Close()
	}
	deny := func(from, to string, port uint16, why string) {
		t.Helper()
		if c, err := dialIn(cs[from], netip.AddrPortFrom(addrs[to], port), 1500*time.Millisecond); err == nil {
			c.Close()
			t.Fatalf("%s -> %s:%d connected, want denied (%s)", from, to, port, why)
		}
	}
	allow("client", "web", 8080)
	deny("client", "web", 8081, "an Admin Deny beats the middle tier's allow")
	allow("client", "web", 8082) // the Admin Pass skips web-no-8082
	deny("other", "web", 8082, "no Pass for other: the Admin Deny")
	deny("client", "other", 8080, "the Baseline tier: nothing else decided")
	allow("other", "web", 8080)
	deny("client", "ext", 8080, "denied by address before resolving ext.test")
	if got, err := dnsResolve(cs["client"], addrs["dns"], "ext.test."); err != nil || len(got) != 1 || got[0] != addrs["ext"] {
		t.Fatalf("resolve ext.test: %v %v, want %v", got, err, addrs["ext"])
	}
	allow("client", "ext", 8080)
	// IPv6: the AAAA answer, asked over IPv6, enters the resolved set.
	ext6 := netip.AddrPortFrom(addrs6["ext"], 8080)
	if c, err := dialIn(cs["client"], ext6, 1500*time.Millisecond); err == nil {
		c.Close()
		t.Fatalf("client -> %s connected before resolving AAAA, want denied by address", ext6)
	}
	if got, err := dnsResolveType(cs["client"], addrs6["dns"], "ext.test.", dnsmessage.TypeAAAA); err != nil || len(got) != 1 || got[0] != addrs6["ext"] {
		t.Fatalf("resolve ext.test AAAA over IPv6: %v %v, want %v", got, err, addrs6["ext"])
	}
	c6, err := dialIn(cs["client"], ext6, 5*time.Second)
	if err != nil {
		t.Fatalf("client -> %s after the AAAA answer: %v, want allowed", ext6, err)
	}
	echo(t, c6, "client -> ext over IPv6")
	c6.Close()

	var fw api.Firewall
	n.mustXlane(&fw, "fw", "ls")
	var hits []string
	for _, r := range fw.Rules {
		if strings.HasPrefix(r.Name, "policy.") && r.Packets > 0 {
			hits = append(hits, r.Name)
		}
	}
	for _, want := range []string{"policy.admin:web-no-8081.in0", "policy.admin:client-pass-8082.in0", "policy.baseline:default-deny.in0", "policy.admin:client-egress.eg1.dns"} {
		if !strings.Contains(strings.Join(hits, " "), want) {
			t.Errorf("rule %s counted no packet; rules with packets: %v", want, hits)
		}
	}
	if _, stderr, err := n.xlane("fw", "rm", "policy.admin:web-no-8081.in0"); err == nil || !strings.Contains(stderr, "xlane policy") {
		t.Errorf("fw rm of a policy's rule: %v %s, want refused naming the owner", err, stderr)
	}

	// Delete the Baseline policy: other's 8080 opens.
	n.mustXlane(nil, "policy", "delete", "default-deny")
	allow("client", "other", 8080)

	// An endpoint added later with app=web is a subject at once (the
	// recompile within a second).
	web2 := newNetns(t, "po")
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "pol", "--netns", web2, "--label", "app=web")
	cs["web2"], addrs["web2"] = web2, ep.IPs[0]
	for _, p := range []uint16{8080, 8081} {
		echoServer(t, web2, netip.AddrPortFrom(netip.IPv4Unspecified(), p))
	}
	time.Sleep(2 * time.Second)
	allow("client", "web2", 8080)
	deny("client", "web2", 8081, "the Admin Deny of app=web, for an endpoint added after the policy")

	// A file of valid documents with one invalid: nothing applied.
	var before []api.PolicyInfo
	n.mustXlane(&before, "policy", "ls")
	var b strings.Builder
	for i := range 3 {
		tier := "Admin"
		if i == 1 {
			tier = "Developer"
		}
		fmt.Fprintf(&b, "---\napiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p%d}\nspec: {tier: %s, priority: 900, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]}\n", i, tier)
	}
	writeFile(t, file, []byte(b.String()))
	if _, stderr, err := n.xlane("policy", "apply", "-f", file); err == nil || !strings.Contains(stderr, "policies[1] (p1)") || !strings.Contains(stderr, "spec.tier") {
		t.Errorf("apply of a file with an invalid 2nd document: %v %q, want refused naming policies[1] (p1) and spec.tier", err, stderr)
	}
	writeFile(t, file, []byte(strings.Replace(b.String(), "Developer", "Admin", 1)+"---\napiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p3}\nspec: {tier: Admin, prority: 3}\n"))
	if _, stderr, err := n.xlane("policy", "apply", "-f", file); err == nil || !strings.Contains(stderr, "document 4") || !strings.Contains(stderr, "prority") {
		t.Errorf("apply of a file with an unknown field in its 4th document: %v %q, want refused naming document 4 and prority", err, stderr)
	}
	var after []api.PolicyInfo
	n.mustXlane(&after, "policy", "ls")
	if len(after) != len(before) {
		t.Errorf("policies after refused applies: %d, want %d (nothing applied)", len(after), len(before))
	}
	allow("client", "web", 8080) // p0 (a Deny of everything) was not applied

	// 1,000 policies in one request; then a file of 1,000 with one bad.
	b.Reset()
	for i := range 1000 {
		fmt.Fprintf(&b, "---\napiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: bulk-%d}\nspec: {tier: Admin, priority: %d, subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: client}}}}, egress: [{action: Deny, to: [{networks: [10.%d.%d.0/24]}], protocols: [{tcp: {destinationPort: {number: %d}}}]}]}\n",
			i, i+1, 200+i/250, i%250, 9000+i)
	}
	writeFile(t, file, []byte(b.String()))
	start := time.Now()
	n.mustXlane(&applied, "policy", "apply", "-f", file)
	took := time.Since(start)
	if !applied.Applied || len(applied.Created) != 1000 || applied.Rules < 1000 {
		t.Fatalf("apply of 1,000 policies: applied %v, created %d, rules %d", applied.Applied, len(applied.Created), applied.Rules)
	}
	t.Logf("1,000 policies applied in %v (%d firewall rules)", took.Round(time.Millisecond), applied.Rules)
	allow("client", "web", 8080)
	deny("client", "web", 8081, "after 1,000 more policies")
	bad := strings.Replace(b.String(), "networks: [10.202.0.0/24]", "networks: [10.202.0.1/24]", 1)
	writeFile(t, file, []byte(strings.ReplaceAll(bad, "Deny", "Accept")))
	if _, stderr, err := n.xlane("policy", "apply", "-f", file); err == nil || !strings.Contains(stderr, "policies[500] (bulk-500)") || !strings.Contains(stderr, "networks[0]") {
		t.Errorf("apply of 1,000 with a bad CIDR in the 501st: %v %q, want refused naming policies[500] (bulk-500) and networks[0]", err, stderr)
	}
	n.mustXlane(&fw, "fw", "ls")
	for _, r := range fw.Rules {
		if strings.HasPrefix(r.Name, "policy.admin:bulk-") && r.Action != "drop" {
			t.Fatalf("rule %s is %s after a refused apply, want drop (nothing half-applied)", r.Name, r.Action)
		}
	}
}
