package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// frr is a real FRR (zebra + bgpd, Debian's frr package) in a network
// namespace: the top-of-rack router of the BGP tests.
type frr struct {
	t     *testing.T
	ns    string
	dir   string
	procs []*exec.Cmd
}

// startFRR runs zebra and bgpd (and extra daemons, e.g. bfdd) in netns
// with conf (frr.conf), their sockets, pid files and logs in a directory
// of the test's; all are stopped (by pid) when the test ends. They run as
// the package's frr user (its vty sockets belong to the frrvty group,
// which root is not in).
func startFRR(t *testing.T, netns, conf string, extra ...string) *frr {
	t.Helper()
	if _, err := os.Stat("/usr/lib/frr/bgpd"); err != nil {
		t.Fatalf("FRR is not installed (scripts/deps.sh installs the frr package): %v", err)
	}
	// Not t.TempDir(): its parent is closed to the frr user.
	dir, err := os.MkdirTemp("", "xle-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	f := &frr{t: t, ns: netns, dir: dir}
	cfg := filepath.Join(f.dir, "frr.conf")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	zserv := filepath.Join(f.dir, "zserv.api")
	daemons := append([]string{"zebra"}, extra...)
	daemons = append(daemons, "bgpd")
	for _, d := range daemons {
		args := []string{"/usr/lib/frr/" + d, "-f", cfg, "-i", filepath.Join(f.dir, d+".pid"), "-z", zserv,
			"--vty_socket", f.dir, "-u", "frr", "-g", "frr", "-P", "0", "--log", "file:" + filepath.Join(f.dir, d+".log")}
		switch d {
		case "bgpd":
			args = append(args, "-p", "179")
		case "bfdd":
			args = append(args, "--bfdctl", filepath.Join(f.dir, "bfdd.sock"))
		}
		cmd := inNS(netns, args...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", d, err)
		}
		f.procs = append(f.procs, cmd)
		// bgpd connects to zebra's socket: wait for it.
		for deadline := time.Now().Add(10 * time.Second); d == "zebra" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(zserv); err == nil {
				break
			}
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range daemons {
				log, _ := os.ReadFile(filepath.Join(f.dir, d+".log"))
				t.Logf("%s log (tail):\n%s", d, tail(string(log), 4000))
			}
			t.Logf("router: %s", f.summary())
		}
		for _, p := range f.procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range f.procs {
			done := make(chan struct{})
			go func() { p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				p.Process.Kill()
				<-done
			}
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out := f.vtysh("show bgp summary"); strings.Contains(out, "BGP router identifier") {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("FRR did not come up: %s", f.vtysh("show bgp summary"))
		}
	}
}

// vtysh runs one vtysh command against this FRR.
func (f *frr) vtysh(cmd string) string {
	out, err := exec.Command("vtysh", "--vty_socket", f.dir, "-c", cmd).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("vtysh -c %q: %v: %s", cmd, err, out)
	}
	return string(out)
}

// vtyshConf applies configuration lines (each a vtysh command, in
// configure mode) to this FRR.
func (f *frr) vtyshConf(lines ...string) {
	f.t.Helper()
	args := []string{"--vty_socket", f.dir, "-c", "configure terminal"}
	for _, l := range lines {
		args = append(args, "-c", l)
	}
	if out, err := exec.Command("vtysh", args...).CombinedOutput(); err != nil || strings.Contains(string(out), "%") {
		f.t.Fatalf("vtysh %q: %v: %s", lines, err, out)
	}
}

// frrPath is one path of a prefix in FRR's BGP table.
type frrPath struct {
	Valid     bool `json:"valid"`
	Stale     bool `json:"stale"`
	Multipath bool `json:"multipath"`
	Bestpath  bool `json:"bestpath"`
	Nexthops  []struct {
		IP string `json:"ip"`
	} `json:"nexthops"`
}

// routes is FRR's BGP table of a family (ipv4, ipv6): prefix → paths.
func (f *frr) routes(fam string) map[string][]frrPath {
	f.t.Helper()
	out := f.vtysh("show bgp " + fam + " unicast json")
	var tbl struct {
		Routes map[string][]frrPath `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &tbl); err != nil {
		f.t.Fatalf("show bgp %s unicast json: %v: %s", fam, err, out)
	}
	return tbl.Routes
}

// nextHops lists the next hops of pfx's valid paths, sorted, each with
// " (stale)" when FRR keeps it as stale (graceful restart).
func (f *frr) nextHops(pfx netip.Prefix) []string {
	fam := "ipv4"
	if pfx.Addr().Is6() {
		fam = "ipv6"
	}
	var out []string
	for _, p := range f.routes(fam)[pfx.String()] {
		if !p.Valid || len(p.Nexthops) == 0 {
			continue
		}
		s := p.Nexthops[0].IP
		if p.Stale {
			s += " (stale)"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// bgpRouter is the rack's router as the tests read it: FRR or BIRD.
type bgpRouter interface {
	// nextHops lists the next hops of pfx's valid paths in the
	// router's BGP table, sorted, each with " (stale)" while the router
	// keeps it as stale (graceful restart).
	nextHops(pfx netip.Prefix) []string
	// summary is the router's sessions, for failure messages.
	summary() string
	netns() string
}

func (f *frr) netns() string { return f.ns }

func (f *frr) summary() string { return f.vtysh("show bgp summary") }

// waitRoute waits until FRR has exactly the next hops want for pfx.
func (f *frr) waitRoute(pfx netip.Prefix, timeout time.Duration, want ...string) time.Duration {
	f.t.Helper()
	return waitRoute(f.t, f, pfx, timeout, want...)
}

// waitRoute waits until rt has exactly the next hops want for pfx (none:
// withdrawn) and returns how long that took; with next hops, it then
// waits for the route in the router's kernel too.
func waitRoute(t *testing.T, rt bgpRouter, pfx netip.Prefix, timeout time.Duration, want ...string) time.Duration {
	t.Helper()
	slices.Sort(want)
	start := time.Now()
	var got []string
	for time.Since(start) < timeout {
		if got = rt.nextHops(pfx); slices.Equal(got, want) {
			took := time.Since(start)
			// Traffic needs the kernel route too (the FIB lags the
			// RIB by a few ms).
			for len(want) > 0 && time.Since(start) < timeout {
				fam := "-4"
				if pfx.Addr().Is6() {
					fam = "-6"
				}
				if out, _ := inNS(rt.netns(), "ip", fam, "route", "show", pfx.String()).Output(); len(out) > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			return took
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("router: %s has next hops %q after %s, want %q\n%s", pfx, got, timeout, want, rt.summary())
	return 0
}

// bgpNode is one xlaned of the BGP tests, on the rack's segment.
type bgpNode struct {
	*node
	name           string
	under4, under6 netip.Addr
	pod4, pod6     netip.Prefix
	pod            string // a pod's namespace
	ep             api.EndpointInfo
}

// bgpRack is the rack: a router namespace ("tor") with FRR, a bridge to
// the nodes (192.168.78.0/24, fd00:78::/64; the router .254) and a client
// namespace behind the router (172.31.78.2, fd00:31:78::2) whose only
// route is the router. The router knows the pods and the LoadBalancer
// addresses only from BGP.
//
//	client 172.31.78.2 ── tor 172.31.78.1 (FRR, AS 65000, 192.168.78.254)
//	                       │ br0
//	     ┌─────────────────┴──────────────┐
//	 n1 ul0 192.168.78.1 (AS 65001)   n2 ul0 192.168.78.2 (AS 65001)
//	 pods 10.245.1.0/24               pods 10.245.2.0/24
type bgpRack struct {
	tor, client string
	frr         *frr      // the router: FRR,
	bird        *bird     // or BIRD (bgpRackOpts.bird)
	router      bgpRouter // the one running
	nodes       []*bgpNode
	// kube, when set before the nodes start (bgpKubeRack), makes them
	// xlaned --kubernetes against it: their node records come from the
	// Node objects.
	kube *controlPlane
}

var (
	bgpClient4 = netip.MustParseAddr("172.31.78.2")
	bgpClient6 = netip.MustParseAddr("fd00:31:78::2")
)

const bgpFRRConf = `frr defaults datacenter
hostname tor
log timestamp precision 3
router bgp 65000
 bgp router-id 192.168.78.254
 no bgp ebgp-requires-policy
 bgp graceful-restart
 neighbor NODES peer-group
 neighbor NODES remote-as 65001
 neighbor NODES timers 3 9
 neighbor NODES6 peer-group
 neighbor NODES6 remote-as 65001
 neighbor NODES6 timers 3 9
%s address-family ipv4 unicast
  neighbor NODES activate
  no neighbor NODES6 activate
  maximum-paths 8
 exit-address-family
 address-family ipv6 unicast
  neighbor NODES6 activate
  maximum-paths 8
 exit-address-family
`

// newBGPRack starts the router and n nodes, each with xlaned --bgp-asn
// 65001 and flags, a network "pods" on its pod CIDRs (unsolicited flows
// allowed: the client reaches the pods) with one pod, and both sessions
// (IPv4, IPv6) to the router added. segments puts node i on a segment of
// its own (bridge br<i-1>, 192.168.<77+i>.0/24, fd00:<77+i>::/64), the
// router redistributing its connected prefixes, with no route of the
// nodes' but what BGP gives them; else every node is on br0.
func newBGPRack(t *testing.T, n int, segments bool, flags ...string) *bgpRack {
	t.Helper()
	return newBGPRackWith(t, n, segments, nil, flags...)
}

// newBGPRackWith is newBGPRack with a hook run once the router is up,
// before the nodes start (bgpKubeRack starts a control plane there).
func newBGPRackWith(t *testing.T, n int, segments bool, before func(*bgpRack), flags ...string) *bgpRack {
	t.Helper()
	return newBGPRackOpts(t, bgpRackOpts{n: n, segments: segments, before: before}, flags...)
}

// bgpRackOpts shape a rack: n nodes, on segments of their own or not, a
// hook before the nodes start, BIRD as the router instead of FRR, BFD on
// every session (FRR's bfdd, the nodes' peers added with --bfd).
type bgpRackOpts struct {
	n        int
	segments bool
	before   func(*bgpRack)
	bird     bool
	bfd      bool
}

func newBGPRackOpts(t *testing.T, o bgpRackOpts, flags ...string) *bgpRack {
	t.Helper()
	n, segments, before := o.n, o.segments, o.before
	r := &bgpRack{tor: newNetns(t, "tor"), client: newNetns(t, "bcl")}
	seg := func(i int) int {
		if segments {
			return 77 + i
		}
		return 78
	}
	for i := 1; i <= n; i++ {
		br := fmt.Sprintf("br%d", i-1)
		if i > 1 && !segments {
			break
		}
		runIn(t, r.tor, "ip", "link", "add", br, "type", "bridge")
		runIn(t, r.tor, "ip", "link", "set", br, "up")
		runIn(t, r.tor, "ip", "addr", "add", fmt.Sprintf("192.168.%d.254/24", seg(i)), "dev", br)
		runIn(t, r.tor, "ip", "addr", "add", fmt.Sprintf("fd00:%d::254/64", seg(i)), "dev", br, "nodad")
	}
	runIn(t, r.tor, "ip", "link", "set", "lo", "up")
	runIn(t, r.tor, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	run(t, "ip", "-n", r.tor, "link", "add", "cl0", "type", "veth", "peer", "name", "eth0", "netns", r.client)
	runIn(t, r.tor, "ip", "addr", "add", "172.31.78.1/24", "dev", "cl0")
	runIn(t, r.tor, "ip", "addr", "add", "fd00:31:78::1/64", "dev", "cl0", "nodad")
	runIn(t, r.tor, "ip", "link", "set", "cl0", "up")
	runIn(t, r.client, "ip", "addr", "add", bgpClient4.String()+"/24", "dev", "eth0")
	runIn(t, r.client, "ip", "addr", "add", bgpClient6.String()+"/64", "dev", "eth0", "nodad")
	runIn(t, r.client, "ip", "link", "set", "eth0", "up")
	runIn(t, r.client, "ip", "link", "set", "lo", "up")
	runIn(t, r.client, "ip", "route", "add", "default", "via", "172.31.78.1")
	runIn(t, r.client, "ip", "-6", "route", "add", "default", "via", "fd00:31:78::1")
	var neigh strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&neigh, " neighbor 192.168.%d.%d peer-group NODES\n neighbor fd00:%d::%d peer-group NODES6\n", seg(i), i, seg(i), i)
	}
	var peerFlags, frrDaemons []string
	if o.bfd {
		neigh.WriteString(" neighbor NODES bfd\n neighbor NODES6 bfd\n")
		peerFlags, frrDaemons = []string{"--bfd"}, []string{"bfdd"}
	}
	conf := fmt.Sprintf(bgpFRRConf, neigh.String())
	if segments {
		// Every node is AS 65001: the router replaces it in the paths
		// it passes between them (else each rejects the others' pod
		// CIDRs as an AS loop).
		conf = strings.ReplaceAll(conf, "  maximum-paths 8\n", "  maximum-paths 8\n  redistribute connected\n  neighbor NODES as-override\n  neighbor NODES6 as-override\n")
	}
	if o.bird {
		bconf := birdConf(n)
		if o.bfd {
			// error wait time: BIRD restarts a session that ended in an
			// error (BFD down) after 60 s by default.
			bconf = strings.ReplaceAll(bconf, "  graceful restart on;\n", "  graceful restart on;\n  bfd on;\n  error wait time 1, 30;\n") +
				"protocol bfd {}\n"
		}
		r.bird = startBIRD(t, r.tor, bconf)
		r.router = r.bird
	} else {
		r.frr = startFRR(t, r.tor, conf, frrDaemons...)
		r.router = r.frr
	}
	if before != nil {
		before(r)
	}
	for i := 1; i <= n; i++ {
		b := &bgpNode{name: fmt.Sprintf("n%d", i),
			under4: netip.MustParseAddr(fmt.Sprintf("192.168.%d.%d", seg(i), i)),
			under6: netip.MustParseAddr(fmt.Sprintf("fd00:%d::%d", seg(i), i)),
			pod4:   netip.MustParsePrefix(fmt.Sprintf("10.245.%d.0/24", i)),
			pod6:   netip.MustParsePrefix(fmt.Sprintf("fd00:245:0:%d::/64", i))}
		b.node = newNode(t, func(nd *node) {
			port, br := fmt.Sprintf("p%d", i), "br0"
			if segments {
				br = fmt.Sprintf("br%d", i-1)
			}
			run(t, "ip", "-n", r.tor, "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", nd.netns)
			run(t, "ip", "-n", r.tor, "link", "set", port, "master", br, "up")
			runIn(t, nd.netns, "ip", "addr", "add", b.under4.String()+"/24", "dev", "ul0")
			runIn(t, nd.netns, "ip", "addr", "add", b.under6.String()+"/64", "dev", "ul0", "nodad")
			runIn(t, nd.netns, "ip", "link", "set", "ul0", "up")
			runIn(t, nd.netns, "ip", "link", "set", "lo", "up")
			if !segments {
				runIn(t, nd.netns, "ip", "route", "add", "default", "via", "192.168.78.254")
				runIn(t, nd.netns, "ip", "-6", "route", "add", "default", "via", "fd00:78::254")
			}
			nd.flags = append(nd.flags, "--uplink", "ul0", "--node-name", b.name, "--cluster-cidr", "10.245.0.0/16,fd00:245::/48",
				"--bgp-asn", "65001")
			if r.kube != nil {
				nd.flags = append(nd.flags, "--kubernetes", "--kubeconfig", r.kube.kubeconfig)
			}
			nd.flags = append(nd.flags, flags...)
		})
		if r.kube != nil {
			waitFor(t, 30*time.Second, b.name+": its Node as its node record", func() bool {
				var got []model.Node
				b.mustXlane(&got, "node", "ls")
				return slices.ContainsFunc(got, func(n model.Node) bool { return n.Name == b.name && n.Self })
			})
		} else {
			b.mustXlane(nil, "node", "add", b.name, "--underlay", b.under4.String(), "--underlay", b.under6.String(),
				"--pod-cidr", b.pod4.String(), "--pod-cidr", b.pod6.String())
		}
		b.mustXlane(nil, "network", "create", "pods", "--allow-unsolicited")
		b.pod = newNetns(t, "bpod")
		b.mustXlane(&b.ep, "endpoint", "add", "pods", "--netns", b.pod)
		// (In Kubernetes mode the peers come from the Node's
		// annotation: bgpKubePeers.)
		for _, peer := range []string{fmt.Sprintf("192.168.%d.254", seg(i)), fmt.Sprintf("fd00:%d::254", seg(i))} {
			if r.kube == nil {
				b.mustXlane(nil, append([]string{"bgp", "peer", "add", peer, "--asn", "65000", "--hold-time", "9"}, peerFlags...)...)
			}
		}
		r.nodes = append(r.nodes, b)
	}
	return r
}

// waitEstablished waits until every node's two sessions are up.
func (r *bgpRack) waitEstablished(t *testing.T) {
	t.Helper()
	for _, b := range r.nodes {
		var st api.BGPStatus
		deadline := time.Now().Add(30 * time.Second)
		for {
			b.mustXlane(&st, "bgp", "status")
			up := 0
			for _, p := range st.Peers {
				if p.State == "established" {
					up++
				}
			}
			if up == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: sessions not established after 30 s: %+v\nrouter: %s", b.name, st.Peers, r.router.summary())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestBGP: xlaned's embedded BGP speaker with a real FRR as the rack's
// router (IPv4 and IPv6 sessions): the router's RIB shows each node's pod
// CIDRs and the LoadBalancer addresses (VIPs inside an LB pool) with the
// nodes as next hops (ECMP where several nodes serve one), a client
// behind the router reaches a pod and a LoadBalancer VIP (SHA-256-checked
// TCP), and the routes go when they should: the service deleted, its last
// (local) backend gone, the peer removed, xlaned stopped with --bgp-stop
// withdraw; kill -9 keeps them (graceful restart: stale in the router,
// traffic flows) until the restarted xlaned refreshes them.
func TestBGP(t *testing.T) {
	skipInMatrixGuest(t, "FRR is not in the guests")
	r := newBGPRack(t, 2, false, "--metrics-addr", metricsAddr)
	r.waitEstablished(t)
	n1, n2 := r.nodes[0], r.nodes[1]
	size := bulkSize(4 << 20)
	mon1 := n1.startMonitor(t, "-t", "bgp")

	t.Run("pod cidrs", func(t *testing.T) {
		for _, b := range r.nodes {
			r.frr.waitRoute(b.pod4, 10*time.Second, b.under4.String())
			r.frr.waitRoute(b.pod6, 10*time.Second, b.under6.String())
		}
		// The client reaches each node's pod through the router.
		for _, b := range r.nodes {
			seen := exchangeVia(t, r.client, b.pod, netip.AddrPortFrom(b.ep.IPs[0], 9100), netip.AddrPortFrom(b.ep.IPs[0], 9100), size)
			if seen.Addr() != bgpClient4 {
				t.Errorf("%s's pod saw %s, want the client %s", b.name, seen, bgpClient4)
			}
			exchangeVia(t, r.client, b.pod, netip.AddrPortFrom(b.ep.IPs[1], 9100), netip.AddrPortFrom(b.ep.IPs[1], 9100), size)
		}
	})

	lb4 := netip.MustParseAddr("198.51.100.10")
	lb6 := netip.MustParseAddr("2001:db8:100::10")
	host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
	for _, b := range r.nodes {
		b.mustXlane(nil, "lb-pool", "create", "public", "--cidr", "198.51.100.0/28", "--cidr", "2001:db8:100::/120",
			"--community", "65001:100", "--med", "20")
	}

	t.Run("loadbalancer vip", func(t *testing.T) {
		// On n1 only, backend its own pod (what externalTrafficPolicy
		// Local leaves on the node that has the endpoint).
		n1.mustXlane(nil, "service", "create", "web4", "--vip", lb4.String()+":80", "--backend", n1.ep.IPs[0].String()+":9200")
		n1.mustXlane(nil, "service", "create", "web6", "--vip", "["+lb6.String()+"]:80", "--backend", "["+n1.ep.IPs[1].String()+"]:9200")
		took := r.frr.waitRoute(host(lb4), 10*time.Second, n1.under4.String())
		t.Logf("service created → route in the router's RIB: %s", took)
		ev := mon1.next(t, 5*time.Second, func(e api.MonitorEvent) bool { return e.Type == "bgp" && e.Prefix == host(lb4).String() })
		if ev.Action != "advertise" || ev.Reason != "service web4 (pool public)" {
			t.Errorf("monitor event %+v, want bgp advertise of %s, reason service web4 (pool public)", ev, host(lb4))
		}
		r.frr.waitRoute(host(lb6), 10*time.Second, n1.under6.String())
		if out := r.frr.vtysh("show bgp ipv4 unicast " + host(lb4).String()); !strings.Contains(out, "Community: 65001:100") || !strings.Contains(out, "metric 20") {
			t.Errorf("router's path of %s:\n%s\nwant community 65001:100 and MED (metric) 20, the pool's", lb4, out)
		}
		seen := exchangeVia(t, r.client, n1.pod, netip.AddrPortFrom(n1.ep.IPs[0], 9200), netip.AddrPortFrom(lb4, 80), size)
		if seen.Addr() != bgpClient4 {
			t.Errorf("the pod saw %s, want the client %s", seen, bgpClient4)
		}
		exchangeVia(t, r.client, n1.pod, netip.AddrPortFrom(n1.ep.IPs[1], 9200), netip.AddrPortFrom(lb6, 80), size)
	})

	t.Run("ecmp", func(t *testing.T) {
		// n2 serves it too (its own pod): both nodes are next hops.
		n2.mustXlane(nil, "service", "create", "web4", "--vip", lb4.String()+":80", "--backend", n2.ep.IPs[0].String()+":9200")
		r.frr.waitRoute(host(lb4), 10*time.Second, n1.under4.String(), n2.under4.String())
		// zebra installs the multipath route in the router's kernel.
		var out string
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			out = runIn(t, r.tor, "ip", "route", "show", lb4.String())
			if strings.Contains(out, "via 192.168.78.1") && strings.Contains(out, "via 192.168.78.2") {
				return
			}
		}
		t.Errorf("router's kernel route to %s: %q, want both nodes (ECMP)", lb4, out)
	})

	t.Run("withdraw when the last local backend goes", func(t *testing.T) {
		n2.mustXlane(nil, "service", "update", "web4", "--backend", n2.ep.IPs[0].String()+":9200@0")
		took := r.frr.waitRoute(host(lb4), 10*time.Second, n1.under4.String())
		t.Logf("last backend drained → n2's route withdrawn in %s", took)
		n2.mustXlane(nil, "service", "rm", "web4")
	})

	t.Run("withdraw on service delete", func(t *testing.T) {
		n1.mustXlane(nil, "service", "rm", "web6")
		took := r.frr.waitRoute(host(lb6), 10*time.Second)
		t.Logf("service deleted → route withdrawn in %s", took)
		mon1.next(t, 5*time.Second, func(e api.MonitorEvent) bool {
			return e.Type == "bgp" && e.Action == "withdraw" && e.Prefix == host(lb6).String()
		})
	})

	t.Run("status", func(t *testing.T) {
		var st api.BGPStatus
		n1.mustXlane(&st, "bgp", "status")
		if !st.Enabled || st.ASN != 65001 || st.RouterID != n1.under4.String() {
			t.Errorf("status %+v: want enabled, AS 65001, router ID %s (the uplink's)", st, n1.under4)
		}
		for _, p := range st.Peers {
			local := n1.under4.String()
			if p.Address.Is6() {
				local = n1.under6.String()
			}
			if p.State != "established" || p.Sent == 0 || p.Uptime < 0 || !p.GracefulRestart || p.Local != local {
				t.Errorf("peer %+v: want established with prefixes sent, graceful restart negotiated, local address %s", p, local)
			}
		}
		// The same per peer in the metrics.
		mfs := scrape(t, n1.node)
		for _, p := range st.Peers {
			peer := map[string]string{"peer": p.Address.String()}
			if v := sample(mfs, "xlane_bgp_session_established", peer); v != 1 {
				t.Errorf("xlane_bgp_session_established{peer=%s} = %v, want 1", p.Address, v)
			}
			if v := sample(mfs, "xlane_bgp_prefixes_sent", peer); v != float64(p.Sent) {
				t.Errorf("xlane_bgp_prefixes_sent{peer=%s} = %v, want %d (bgp status)", p.Address, v, p.Sent)
			}
			if v := sample(mfs, "xlane_bgp_session_uptime_seconds", peer); v <= 0 {
				t.Errorf("xlane_bgp_session_uptime_seconds{peer=%s} = %v, want > 0", p.Address, v)
			}
		}
		if v := sample(mfs, "xlane_bgp_announced_routes", nil); v != float64(len(st.Announced)) {
			t.Errorf("xlane_bgp_announced_routes = %v, want %d", v, len(st.Announced))
		}
		var got []string
		for _, a := range st.Announced {
			got = append(got, a.Prefix.String())
		}
		want := []string{n1.pod4.String(), host(lb4).String(), n1.pod6.String()}
		if !slices.Equal(got, want) {
			t.Errorf("announced %q, want %q", got, want)
		}
		out, _, err := n1.xlane("bgp", "status")
		if err != nil || !strings.Contains(out, "established") || !strings.Contains(out, "service web4 (pool public)") {
			t.Errorf("xlane bgp status: %v\n%s", err, out)
		}
	})

	t.Run("graceful restart after kill -9", func(t *testing.T) {
		n1.stop(syscall.SIGKILL)
		// The router keeps n1's routes, stale, and traffic flows (the
		// datapath outlives xlaned).
		r.frr.waitRoute(host(lb4), 15*time.Second, n1.under4.String()+" (stale)")
		r.frr.waitRoute(n1.pod4, 5*time.Second, n1.under4.String()+" (stale)")
		exchangeVia(t, r.client, n1.pod, netip.AddrPortFrom(n1.ep.IPs[0], 9200), netip.AddrPortFrom(lb4, 80), size)
		// Hold time 9 s: past it, the routes are still there.
		time.Sleep(10 * time.Second)
		if got := r.frr.nextHops(host(lb4)); !slices.Equal(got, []string{n1.under4.String() + " (stale)"}) {
			t.Fatalf("router: %s → %q 10 s after kill -9, want kept as stale", lb4, got)
		}
		start := time.Now()
		n1.start()
		r.frr.waitRoute(host(lb4), 30*time.Second, n1.under4.String())
		r.frr.waitRoute(n1.pod4, 5*time.Second, n1.under4.String())
		r.frr.waitRoute(n1.pod6, 5*time.Second, n1.under6.String())
		t.Logf("restarted xlaned refreshed its routes %s after its start", time.Since(start))
		exchangeVia(t, r.client, n1.pod, netip.AddrPortFrom(n1.ep.IPs[0], 9200), netip.AddrPortFrom(lb4, 80), size)
	})

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"bgp", "peer", "add", "192.168.78.254", "--asn", "0"}, "asn 0: reserved AS number"},
			{[]string{"bgp", "peer", "add", "192.168.78.254", "--asn", "65535"}, "asn 65535: reserved"},
			{[]string{"bgp", "peer", "add", "not-an-ip", "--asn", "65000"}, `address "not-an-ip": not an IP address`},
			{[]string{"bgp", "peer", "add", "192.168.78.254", "--asn", "65000"}, "bgp peer 192.168.78.254 exists"},
			{[]string{"bgp", "peer", "add", "192.168.78.253", "--asn", "65000", "--hold-time", "2"}, "hold_time 2: want 3-65535"},
			{[]string{"lb-pool", "create", "more", "--cidr", "198.51.100.8/29"}, `cidrs 198.51.100.8/29 overlaps 198.51.100.0/28 of pool "public"`},
			{[]string{"lb-pool", "create", "wide", "--cidr", "10.0.0.0/7"}, "cidrs 10.0.0.0/7: too large"},
			{[]string{"lb-pool", "create", "bits", "--cidr", "198.51.100.17/28"}, "cidrs 198.51.100.17/28: host bits set"},
			{[]string{"lb-pool", "create", "comm", "--cidr", "198.51.100.64/28", "--community", "70000:1"}, `communities "70000:1"`},
		} {
			_, stderr, err := n1.xlane(c.args...)
			if err == nil || !strings.Contains(stderr, c.want) {
				t.Errorf("xlane %s: %v %q, want an error with %q", strings.Join(c.args, " "), err, stderr, c.want)
			}
		}
		var pools []api.LBPoolInfo
		n1.mustXlane(&pools, "lb-pool", "ls")
		if len(pools) != 1 {
			t.Errorf("pools after the refused creates: %+v, want public alone", pools)
		}
		// An unreachable peer retries in the background and disturbs
		// nothing: the router's sessions stay up.
		n1.mustXlane(nil, "bgp", "peer", "add", "192.168.78.99", "--asn", "65000")
		time.Sleep(2 * time.Second)
		var st api.BGPStatus
		n1.mustXlane(&st, "bgp", "status")
		for _, p := range st.Peers {
			want := "established"
			if p.Address.String() == "192.168.78.99" {
				if p.State == want {
					t.Errorf("peer %s (nobody there): established", p.Address)
				}
				continue
			}
			if p.State != want {
				t.Errorf("peer %s: %s beside an unreachable peer, want %s", p.Address, p.State, want)
			}
		}
		n1.mustXlane(nil, "bgp", "peer", "rm", "192.168.78.99")
	})

	t.Run("wrong as, password", func(t *testing.T) {
		// On n2's IPv6 session; its IPv4 session and routes must not
		// notice.
		mon2 := n2.startMonitor(t, "-t", "bgp")
		peer6 := "fd00:78::254"
		flaps := func() uint32 {
			var st api.BGPStatus
			n2.mustXlane(&st, "bgp", "status")
			for _, p := range st.Peers {
				if p.Address.Is4() {
					if p.State != "established" {
						t.Errorf("n2's IPv4 session %s beside the failing IPv6 one", p.State)
					}
					return p.Flaps
				}
			}
			t.Fatal("n2 has no IPv4 peer")
			return 0
		}
		before := flaps()
		peerStatus := func() api.BGPPeerStatus {
			var st api.BGPStatus
			n2.mustXlane(&st, "bgp", "status")
			for _, p := range st.Peers {
				if p.Address.String() == peer6 {
					return p
				}
			}
			t.Fatalf("no peer %s in %+v", peer6, st.Peers)
			return api.BGPPeerStatus{}
		}
		readd := func(args ...string) {
			n2.mustXlane(nil, "bgp", "peer", "rm", peer6)
			n2.mustXlane(nil, append([]string{"bgp", "peer", "add", peer6, "--hold-time", "9"}, args...)...)
		}

		// The router is AS 65000, not 65099: the OPEN is refused, the
		// monitor and status say why, and after the try window (15 s)
		// the attempts pause (backoff).
		readd("--asn", "65099")
		ev := mon2.next(t, 20*time.Second, func(e api.MonitorEvent) bool { return e.Action == "failed" && e.Peer == peer6 })
		t.Logf("wrong AS: %+v", ev)
		if !strings.Contains(strings.ToLower(ev.Reason), "peer as") {
			t.Errorf("failed event's reason %q, want the bad peer AS named", ev.Reason)
		}
		var p api.BGPPeerStatus
		waitFor(t, 25*time.Second, "the wrong-AS peer's attempts paused (retry_at)", func() bool {
			p = peerStatus()
			return !p.RetryAt.IsZero()
		})
		if p.State == "established" || !strings.Contains(strings.ToLower(p.LastDown), "peer as") {
			t.Errorf("wrong-AS peer %+v: want not established, last down naming the bad peer AS", p)
		}
		ev = mon2.next(t, 5*time.Second, func(e api.MonitorEvent) bool { return e.Action == "backoff" && e.Peer == peer6 })
		if !strings.Contains(ev.Reason, "next try in 5s") {
			t.Errorf("backoff event %+v, want the first pause, 5s", ev)
		}
		out, _, _ := n2.xlane("bgp", "status")
		if !strings.Contains(out, "(retry in ") {
			t.Errorf("xlane bgp status does not show the pause:\n%s", out)
		}

		// The router wants a TCP MD5 password on n2's IPv6 session now.
		r.frr.vtyshConf("router bgp 65000", "neighbor fd00:78::2 password s3cret")
		readd("--asn", "65000", "--password", "wrong")
		time.Sleep(12 * time.Second) // a try window's worth of attempts
		if p = peerStatus(); p.State == "established" {
			t.Errorf("peer with a wrong password: %+v, want not established", p)
		}
		readd("--asn", "65000", "--password", "s3cret")
		mon2.next(t, 30*time.Second, func(e api.MonitorEvent) bool { return e.Action == "up" && e.Peer == peer6 })
		r.frr.waitRoute(n2.pod6, 10*time.Second, n2.under6.String())
		if out := r.frr.vtysh("show bgp neighbors fd00:78::2"); !strings.Contains(out, "Peer Authentication Enabled") {
			t.Errorf("router's neighbor fd00:78::2 has no MD5 authentication:\n%s", tail(out, 2000))
		}
		var peers []model.BGPPeer
		n2.mustXlane(&peers, "bgp", "peer", "ls")
		for _, pp := range peers {
			if pp.Password != "" {
				t.Errorf("bgp peer ls shows the password of %s", pp.Address)
			}
		}
		// Nothing else was disturbed.
		if after := flaps(); after != before {
			t.Errorf("n2's IPv4 session flapped %d times meanwhile", after-before)
		}
		r.frr.waitRoute(n2.pod4, time.Second, n2.under4.String())
	})

	t.Run("stop", func(t *testing.T) {
		// A peer that never comes up must not hold back the others'
		// routes after a restart (GoBGP's restarting speaker waits for
		// End-of-RIB from every peer, up to its deferral timer).
		n2.mustXlane(nil, "bgp", "peer", "add", "192.168.78.99", "--asn", "65000")
		defer n2.mustXlane(nil, "bgp", "peer", "rm", "192.168.78.99")
		// SIGTERM, graceful (the default): the routes stay, stale.
		n2.stop(syscall.SIGTERM)
		r.frr.waitRoute(n2.pod4, 15*time.Second, n2.under4.String()+" (stale)")
		// --bgp-stop withdraw: the routes go with the daemon.
		n2.flags = append(n2.flags, "--bgp-stop", "withdraw")
		n2.start()
		r.frr.waitRoute(n2.pod4, 30*time.Second, n2.under4.String())
		r.frr.waitRoute(n2.pod6, 30*time.Second, n2.under6.String())
		start := time.Now()
		n2.stop(syscall.SIGTERM)
		r.frr.waitRoute(n2.pod4, 10*time.Second)
		r.frr.waitRoute(n2.pod6, 10*time.Second)
		t.Logf("xlaned stopped with --bgp-stop withdraw: routes gone from the router %s after SIGTERM", time.Since(start))
		n2.start()
		r.frr.waitRoute(n2.pod4, 30*time.Second, n2.under4.String())
	})

	t.Run("peer removed", func(t *testing.T) {
		n2.mustXlane(nil, "bgp", "peer", "rm", "fd00:78::254")
		took := r.frr.waitRoute(n2.pod6, 10*time.Second)
		t.Logf("peer removed → its routes withdrawn in %s", took)
		r.frr.waitRoute(n2.pod4, time.Second, n2.under4.String())
	})

	t.Run("node lost", func(t *testing.T) {
		// n2 drops off the network (its port on the router's bridge
		// down, no FIN, no NOTIFICATION): the router withdraws its
		// routes when the hold time (9 s) runs out, with no graceful
		// restart (the session ended in a NOTIFICATION: hold timer
		// expired).
		start := time.Now()
		runIn(t, r.tor, "ip", "link", "set", "p2", "down")
		r.frr.waitRoute(n2.pod4, 20*time.Second)
		took := time.Since(start)
		t.Logf("node lost → its routes withdrawn after %s (hold time 9 s)", took)
		if took < 5*time.Second {
			t.Errorf("withdrawn %s after the node was lost: before the hold time could run out?", took)
		}
		// Back: the session comes up again (a fresh try window), the
		// routes return.
		start = time.Now()
		runIn(t, r.tor, "ip", "link", "set", "p2", "up")
		r.frr.waitRoute(n2.pod4, 60*time.Second, n2.under4.String())
		t.Logf("link back → routes back after %s", time.Since(start))
	})
}

// TestBGPNative: native routing across two segments joined only by the
// router (FRR redistributes its connected prefixes; the nodes have no
// route of their own beyond their segment): each node learns the other's
// pod CIDRs from the router (xlaned --routing native turns --bgp-learn
// on) and pod ↔ pod TCP flows, SHA-256-checked, in both families, with no
// overlay and no static route.
//
//	n1 ul0 192.168.78.1 ── br0 ─ tor (FRR) ─ br1 ── n2 ul0 192.168.79.2
//	pods 10.245.1.0/24                              pods 10.245.2.0/24
func TestBGPNative(t *testing.T) {
	skipInMatrixGuest(t, "FRR is not in the guests")
	r := newBGPRack(t, 2, true, "--routing", "native")
	r.waitEstablished(t)
	n1, n2 := r.nodes[0], r.nodes[1]
	// The nodes learn the other segment, then each other's records.
	for _, c := range []struct {
		b    *bgpNode
		peer *bgpNode
	}{{n1, n2}, {n2, n1}} {
		for _, a := range []netip.Addr{c.peer.under4, c.peer.under6} {
			var out string
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				b, _ := inNS(c.b.netns, "ip", "route", "get", a.String()).CombinedOutput()
				if out = string(b); strings.Contains(out, " via ") {
					break
				}
			}
			if !strings.Contains(out, " via ") {
				t.Fatalf("%s: route to %s: %q, want one learned from the router", c.b.name, a, out)
			}
		}
		c.b.mustXlane(nil, "node", "add", c.peer.name, "--underlay", c.peer.under4.String(), "--underlay", c.peer.under6.String(),
			"--pod-cidr", c.peer.pod4.String(), "--pod-cidr", c.peer.pod6.String())
	}
	for _, c := range []struct{ b, peer *bgpNode }{{n1, n2}, {n2, n1}} {
		for _, p := range []netip.Prefix{c.peer.pod4, c.peer.pod6} {
			var out string
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				fam := "-4"
				if p.Addr().Is6() {
					fam = "-6"
				}
				if out = runIn(t, c.b.netns, "ip", fam, "route", "show", p.String()); strings.Contains(out, "proto bgp") {
					break
				}
			}
			if !strings.Contains(out, "proto bgp") {
				st, _, _ := c.b.xlane("bgp", "status")
				t.Fatalf("%s: route to %s's pods %s: %q, want one learned by BGP\n%s\n%s\nrouter:\n%s", c.b.name, c.peer.name, p, out, st,
					runIn(t, c.b.netns, "ip", "-6", "route"), r.frr.vtysh("show bgp ipv6 unicast"))
			}
		}
	}
	size := bulkSize(8 << 20)
	transfer(t, n1.pod, n2.pod, n2.ep.IPs[0], size)
	transfer(t, n2.pod, n1.pod, n1.ep.IPs[1], size)
	if out := runIn(t, n1.netns, "ip", "link", "show"); strings.Contains(out, "xlvx") {
		t.Errorf("n1 has an overlay device with --routing native:\n%s", out)
	}
	var st api.BGPStatus
	n1.mustXlane(&st, "bgp", "status")
	if !slices.ContainsFunc(st.Learned, func(l api.BGPRoute) bool { return l.Prefix == n2.pod4 }) {
		t.Errorf("n1's bgp status learned %+v, want %s", st.Learned, n2.pod4)
	}
}
