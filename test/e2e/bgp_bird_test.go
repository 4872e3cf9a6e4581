package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bird is a real BIRD 2 (Debian's bird2) in a network namespace: the
// rack's router of TestBGPBird.
type bird struct {
	t    *testing.T
	ns   string
	sock string
}

// birdConfHead is the router's BIRD configuration before the per-node
// protocols (docs/bgp.md shows it as TestBGPBird runs it): the BGP
// routes go to the kernel (ECMP merged), sessions from AS 65001 with a
// 9 s hold time and graceful restart, one template per family.
const birdConfHead = `router id 192.168.78.254;
protocol device {}
protocol kernel { ipv4 { export all; }; merge paths on; }
protocol kernel { ipv6 { export all; }; merge paths on; }
template bgp nodes {
  local as 65000;
  neighbor as 65001;
  hold time 9;
  graceful restart on;
  ipv4 { import all; export none; };
}
template bgp nodes6 {
  local as 65000;
  neighbor as 65001;
  hold time 9;
  graceful restart on;
  ipv6 { import all; export none; };
}
`

// birdConf is the configuration of a rack of n nodes on 192.168.78.0/24
// and fd00:78::/64 (nodes .1 ... .n).
func birdConf(n int) string {
	var b strings.Builder
	b.WriteString(birdConfHead)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "protocol bgp n%d from nodes { neighbor 192.168.78.%d; }\n", i, i)
		fmt.Fprintf(&b, "protocol bgp n%dv6 from nodes6 { neighbor fd00:78::%d; }\n", i, i)
	}
	return b.String()
}

// startBIRD runs bird in netns with conf, its socket and log in a
// directory of the test's; it is stopped (by pid) when the test ends.
func startBIRD(t *testing.T, netns, conf string) *bird {
	t.Helper()
	if _, err := exec.LookPath("bird"); err != nil {
		t.Fatalf("BIRD is not installed (scripts/deps.sh installs the bird2 package): %v", err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bird.conf")
	logf := filepath.Join(dir, "bird.log")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("log %q all;\n", logf)+conf), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bird{t: t, ns: netns, sock: filepath.Join(dir, "bird.ctl")}
	cmd := inNS(netns, "bird", "-f", "-c", cfg, "-s", b.sock, "-P", filepath.Join(dir, "bird.pid"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start bird: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(logf)
			t.Logf("bird output: %s\nbird log (tail):\n%s\nrouter: %s", out.String(), tail(string(log), 4000), b.summary())
		}
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if strings.Contains(b.birdc("show status"), "Daemon is up and running") {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("BIRD did not come up: %s\n%s", b.birdc("show status"), out.String())
		}
	}
}

// birdc runs one birdc command against this BIRD.
func (b *bird) birdc(cmd string) string {
	out, err := exec.Command("birdc", append([]string{"-s", b.sock}, strings.Fields(cmd)...)...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("birdc %s: %v: %s", cmd, err, out)
	}
	return string(out)
}

func (b *bird) netns() string { return b.ns }

func (b *bird) summary() string { return b.birdc("show protocols") }

var birdVia = regexp.MustCompile(`(?m)^\s+via (\S+) on `)

// nextHops lists the next hops of pfx's routes in BIRD's table (every
// path, best or not: the ECMP set), sorted; a path BIRD keeps from a
// restarting neighbor is marked stale in "show route all" (not used here).
func (b *bird) nextHops(pfx netip.Prefix) []string {
	out := b.birdc("show route " + pfx.String())
	var hops []string
	for _, m := range birdVia.FindAllStringSubmatch(out, -1) {
		hops = append(hops, m[1])
	}
	slices.Sort(hops)
	return hops
}

// bfdUp says whether BIRD's BFD session with peer is up.
func (b *bird) bfdUp(peer netip.Addr) bool {
	for _, l := range strings.Split(b.birdc("show bfd sessions"), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == peer.String() && f[2] == "Up" {
			return true
		}
	}
	return false
}

// established counts BIRD's BGP sessions that are up.
func (b *bird) established() int {
	n := 0
	for _, l := range strings.Split(b.summary(), "\n") {
		if f := strings.Fields(l); len(f) >= 6 && f[1] == "BGP" && f[3] == "up" && f[5] == "Established" {
			n++
		}
	}
	return n
}

// TestBGPBird: the same speaker against BIRD 2 as the rack's router
// (IPv4 and IPv6 sessions): BIRD's table has each node's pod CIDRs and a
// LoadBalancer address with the nodes as next hops (both, where two
// nodes serve it, merged into one ECMP kernel route), a client behind
// BIRD reaches a pod and the LoadBalancer address (SHA-256-checked TCP),
// and a deleted service's route goes.
func TestBGPBird(t *testing.T) {
	skipInMatrixGuest(t, "BIRD is not in the guests")
	r := newBGPRackOpts(t, bgpRackOpts{n: 2, bird: true})
	r.waitEstablished(t)
	if n := r.bird.established(); n != 4 {
		t.Fatalf("BIRD has %d sessions established, want 4 (2 nodes x IPv4, IPv6):\n%s", n, r.bird.summary())
	}
	n1, n2 := r.nodes[0], r.nodes[1]
	size := bulkSize(4 << 20)
	for _, b := range r.nodes {
		waitRoute(t, r.bird, b.pod4, 10*time.Second, b.under4.String())
		waitRoute(t, r.bird, b.pod6, 10*time.Second, b.under6.String())
	}
	seen := exchangeVia(t, r.client, n2.pod, netip.AddrPortFrom(n2.ep.IPs[0], 9100), netip.AddrPortFrom(n2.ep.IPs[0], 9100), size)
	if seen.Addr() != bgpClient4 {
		t.Errorf("n2's pod saw %s, want the client %s", seen, bgpClient4)
	}
	exchangeVia(t, r.client, n1.pod, netip.AddrPortFrom(n1.ep.IPs[1], 9100), netip.AddrPortFrom(n1.ep.IPs[1], 9100), size)

	lb4 := netip.MustParseAddr("198.51.100.10")
	host := netip.PrefixFrom(lb4, 32)
	for _, b := range r.nodes {
		b.mustXlane(nil, "lb-pool", "create", "public", "--cidr", "198.51.100.0/28")
		b.mustXlane(nil, "service", "create", "web4", "--vip", lb4.String()+":80", "--backend", b.ep.IPs[0].String()+":9200")
	}
	took := waitRoute(t, r.bird, host, 10*time.Second, n1.under4.String(), n2.under4.String())
	t.Logf("second service created → both next hops in BIRD's table %s after its create returned", took)
	var out string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out = runIn(t, r.tor, "ip", "route", "show", lb4.String()); strings.Contains(out, "via 192.168.78.1") && strings.Contains(out, "via 192.168.78.2") {
			break
		}
	}
	if !strings.Contains(out, "via 192.168.78.1") || !strings.Contains(out, "via 192.168.78.2") {
		t.Errorf("router's kernel route to %s: %q, want both nodes (ECMP)", lb4, out)
	}
	n2.mustXlane(nil, "service", "rm", "web4")
	took = waitRoute(t, r.bird, host, 10*time.Second, n1.under4.String())
	t.Logf("n2's service deleted → its path withdrawn from BIRD in %s", took)
	seen = exchangeVia(t, r.client, n1.pod, netip.AddrPortFrom(n1.ep.IPs[0], 9200), netip.AddrPortFrom(lb4, 80), size)
	if seen.Addr() != bgpClient4 {
		t.Errorf("the pod saw %s, want the client %s", seen, bgpClient4)
	}
	n1.mustXlane(nil, "service", "rm", "web4")
	took = waitRoute(t, r.bird, host, 10*time.Second)
	t.Logf("last service deleted → withdrawn from BIRD in %s", took)
}
