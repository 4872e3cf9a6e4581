package main

// The nodes `bench/nat` compares. Each is an xlaned in its own node netns
// with one routed network (--masquerade=false), a client container and
// three backend containers:
//
//	client --- node --- b1, b2, b3   (every container on its own veth,
//	                                  /32 routes, the gateway on the node)
//
//	xlane            network --mode tc: services are xlane services (BPF
//	                 conntrack + Maglev in the tc programs)
//	iptables-nft     network --mode kernel (plain Linux routing) and the
//	iptables-legacy  services as kube-proxy's iptables mode writes them,
//	                 loaded with iptables-{nft,legacy}-restore
//
// Above 1,000 endpoints the iptables rules are those of kube-proxy's large
// cluster mode (kubeProxyRules). Service i has VIP 10.96.i/250.i%250+1 (above 62,500: 10.98.x.y on),
// port 80, and three backends, b1..b3 port 20000+i%40000: distinct
// backends per service up to 40,000 services, as distinct pods would be
// (above, a backend port serves up to three services: 100,000 services
// use 40,000 ports of each backend). The "shared" services (10.97.x.y)
// all use b1..b3:8080.

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

const (
	natBackendPort    = 20000 // service i: backends' port natBackendPort+i%natBackendPorts
	natBackendPorts   = 40000
	natPortsPerServer = 15000
	natSharedPort     = 8080
	natVIPPort        = 80
	natMaxServices    = 250000 // below the datapath's 262,144; VIPs 10.96.0.1 to 10.101.x.y, 10.97 skipped
	// kube-proxy's largeClusterEndpointsThreshold (kubeProxyRules).
	kubeProxyLargeClusterEndpoints = 1000
	// The most services (3 backends each) whose legacy nat table fits the
	// kernel's 512 MiB per table: 4,032 bytes each measured in large
	// cluster mode (40.3 MB for 10,000), so 125,000 make ~480 MiB.
	natLegacyMaxServices = 125000
)

var natModes = []string{"xlane", "iptables-nft", "iptables-legacy"}

func natVIP(i int) netip.Addr {
	b := 96 + i/62500
	if b >= 97 {
		b++ // 10.97/16 is the shared services'
	}
	i %= 62500
	return netip.AddrFrom4([4]byte{10, byte(b), byte(i / 250), byte(i%250 + 1)})
}
func natSharedVIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 97, byte(i / 250), byte(i%250 + 1)})
}

type natNode struct {
	mode           string
	prefix         string // netns and pin dir prefix, unique per run
	net            int    // subnet 10.<net>.0.0/24
	bins, dir, pin string
	node, client   string
	backends       []string
	clientIP       netip.Addr
	backendIPs     []netip.Addr
	daemon         *harness.Proc
	undo           harness.UndoStack
	services       int // programmed services (distinct backends)
	shared         int // programmed shared-backend services
}

func newNATNode(mode, runID string, net int, bins, tmp string) *natNode {
	p := runID + "-" + mode
	if len(p) > 24 { // netns names are free, but keep veth-ish names short
		p = runID + "-" + strings.ReplaceAll(mode, "iptables-", "ipt")
	}
	n := &natNode{mode: mode, prefix: p, net: net, bins: bins, dir: filepath.Join(tmp, mode),
		pin: filepath.Join("/sys/fs/bpf", p), node: p + "-node", client: p + "-cl"}
	for i := 1; i <= 3; i++ {
		n.backends = append(n.backends, fmt.Sprintf("%s-b%d", p, i))
	}
	return n
}

func (n *natNode) socket() string { return filepath.Join(n.dir, "xlane.sock") }

func (n *natNode) cli(ctx context.Context, args ...string) (string, error) {
	return harness.Xlane(ctx, n.bins, n.dir, args...)
}

func (n *natNode) restoreBin() string {
	return strings.TrimPrefix(n.mode, "iptables-") // nft, legacy
}

// Setup builds the node; servers listen on ports natBackendPort..+maxSvcs-1
// and natSharedPort of every backend.
func (n *natNode) Setup(ctx context.Context, self string, maxSvcs int) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	if err := harness.AddNamespaces(ctx, &n.undo, append([]string{n.node, n.client}, n.backends...)...); err != nil {
		return err
	}
	var err error
	n.daemon, err = harness.StartXlaned(ctx, &n.undo, harness.Xlaned{
		Name: "xlaned " + n.mode, Netns: n.node, Bins: n.bins, Dir: n.dir, PinDir: n.pin,
		// No calibration: its throwaway networks would hold the daemon
		// while services are programmed and timed.
		Args: []string{"--docker-plugin-socket=", "--calibrate-at-start=false"}, Timeout: 20 * time.Second,
	})
	if err != nil {
		return err
	}
	mode := "tc"
	if n.mode != "xlane" {
		mode = "kernel"
	}
	subnet := fmt.Sprintf("10.%d.0.0/24", n.net)
	if _, err := n.cli(ctx, "network", "create", "svc", "--subnet", subnet, "--mode", mode, "--masquerade=false"); err != nil {
		return err
	}
	n.undo.Push("xlane network rm svc", func(ctx context.Context) error {
		_, err := n.cli(ctx, "network", "rm", "svc", "--force")
		return err
	})
	add := func(ns, id string) (netip.Addr, error) {
		out, err := n.cli(ctx, "-o", "json", "endpoint", "add", "svc", "--netns", ns, "--id", id)
		if err != nil {
			return netip.Addr{}, err
		}
		ep, err := harness.ParseEndpoint(out)
		return ep.IPv4, err
	}
	if n.clientIP, err = add(n.client, "client"); err != nil {
		return err
	}
	for i, b := range n.backends {
		ip, err := add(b, fmt.Sprintf("b%d", i+1))
		if err != nil {
			return err
		}
		n.backendIPs = append(n.backendIPs, ip)
		// A server process per 15,000 ports: one descriptor each, and
		// the open-files limit may be 20,000 and not ours to raise.
		srvs := []struct{ port, count int }{{natSharedPort, 1}}
		for p := 0; p < min(maxSvcs, natBackendPorts); p += natPortsPerServer {
			srvs = append(srvs, struct{ port, count int }{natBackendPort + p, min(natPortsPerServer, min(maxSvcs, natBackendPorts)-p)})
		}
		for _, srv := range srvs {
			name := fmt.Sprintf("server %s b%d :%d+%d", n.mode, i+1, srv.port, srv.count)
			logPath := filepath.Join(n.dir, fmt.Sprintf("server-b%d-%d.log", i+1, srv.port))
			p, err := harness.StartProc(name, logPath, harness.NSExec(b, self, "nat-server", "-addr", ip.String(),
				"-port", fmt.Sprint(srv.port), "-n", fmt.Sprint(srv.count))...)
			if err != nil {
				return err
			}
			n.undo.Push("stop "+name, p.Stop)
			if err := harness.WaitFor(ctx, name, 60*time.Second, p, func() bool {
				b, _ := os.ReadFile(logPath)
				return strings.Contains(string(b), "ready")
			}); err != nil {
				return err
			}
		}
	}
	if n.mode != "xlane" {
		if _, err := harness.RunInput(ctx, kubeProxyRules(nil, subnet), harness.NSExec(n.node, "iptables-"+n.restoreBin()+"-restore")...); err != nil {
			return fmt.Errorf("%s: %w", n.mode, err)
		}
	}
	return nil
}

func (n *natNode) Teardown() error { return n.undo.Run() }

// natSvc is one service as both implementations program it.
type natSvc struct {
	name     string
	vip      netip.AddrPort
	backends []netip.AddrPort
}

func (n *natNode) svc(i int) natSvc {
	s := natSvc{name: fmt.Sprintf("s%d", i), vip: netip.AddrPortFrom(natVIP(i), natVIPPort)}
	for _, b := range n.backendIPs {
		s.backends = append(s.backends, netip.AddrPortFrom(b, uint16(natBackendPort+i%natBackendPorts)))
	}
	return s
}

func (n *natNode) sharedSvc(i int) natSvc {
	s := natSvc{name: fmt.Sprintf("sh%d", i), vip: netip.AddrPortFrom(natSharedVIP(i), natVIPPort)}
	for _, b := range n.backendIPs {
		s.backends = append(s.backends, netip.AddrPortFrom(b, natSharedPort))
	}
	return s
}

// Program brings the node to svcs services and shared shared-backend
// ones (only ever more), and returns how long that took: for xlane one
// apply request (POST /v1/services/apply) with every new service, for
// iptables one restore of the whole rule set, as kube-proxy syncs.
func (n *natNode) Program(ctx context.Context, svcs, shared int) (time.Duration, error) {
	start := time.Now()
	if n.mode == "xlane" {
		var req api.ServiceApply
		add := func(s natSvc) {
			r := api.ServiceCreate{Name: s.name, VIP: s.vip.String() + "/tcp"}
			for _, b := range s.backends {
				r.Backends = append(r.Backends, b.String())
			}
			req.Services = append(req.Services, r)
		}
		for i := n.services; i < svcs; i++ {
			add(n.svc(i))
		}
		for i := n.shared; i < shared; i++ {
			add(n.sharedSvc(i))
		}
		if len(req.Services) > 0 {
			if _, err := api.NewClient(n.socket()).ApplyServices(ctx, req); err != nil {
				return 0, fmt.Errorf("xlane: apply %d services: %w", len(req.Services), err)
			}
		}
		n.services, n.shared = svcs, shared
		return time.Since(start), nil
	}
	// kube-proxy rewrites its tables whole on every sync.
	var all []natSvc
	for i := 0; i < svcs; i++ {
		all = append(all, n.svc(i))
	}
	for i := 0; i < shared; i++ {
		all = append(all, n.sharedSvc(i))
	}
	rules := kubeProxyRules(all, fmt.Sprintf("10.%d.0.0/24", n.net))
	if _, err := harness.RunInput(ctx, rules, harness.NSExec(n.node, "iptables-"+n.restoreBin()+"-restore")...); err != nil {
		return 0, fmt.Errorf("%s restore of %d services: %w", n.mode, len(all), err)
	}
	n.services, n.shared = svcs, shared
	return time.Since(start), nil
}

// BackendChanges times count backend changes through the API (xlane
// only): service i's backend set loses its last backend, then gets it
// back. Returns the durations.
func (n *natNode) BackendChanges(ctx context.Context, count int) ([]time.Duration, error) {
	c := api.NewClient(n.socket())
	var out []time.Duration
	for k := 0; k < count; k++ {
		s := n.svc(k * 7919 % max(n.services, 1))
		var bs []string
		for _, b := range s.backends {
			bs = append(bs, b.String())
		}
		for _, set := range [][]string{bs[:len(bs)-1], bs} {
			t0 := time.Now()
			if _, err := c.UpdateService(ctx, s.name, api.ServiceUpdate{Backends: set}); err != nil {
				return out, fmt.Errorf("update service %s: %w", s.name, err)
			}
			out = append(out, time.Since(t0))
		}
	}
	return out, nil
}

// ServicesMemory is xlane's kernel memory for its services (status).
func (n *natNode) ServicesMemory(ctx context.Context) (*api.ServicesMemory, error) {
	st, err := api.NewClient(n.socket()).Status(ctx)
	if err != nil {
		return nil, err
	}
	return st.Services, nil
}

// Load runs the client against targets (a file) and returns its result.
func (n *natNode) Load(ctx context.Context, self, targets string, d time.Duration, conc int) (connrate.Result, error) {
	var r connrate.Result
	ctx, cancel := context.WithTimeout(ctx, d+60*time.Second)
	defer cancel()
	out, err := harness.Run(ctx, harness.NSExec(n.client, self, "nat-client", "-targets", targets,
		"-duration", d.String(), "-conc", fmt.Sprint(conc))...)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return r, fmt.Errorf("nat-client output %q: %w", out, err)
	}
	return r, nil
}

// State is a one-line summary of the node's connection tracking.
func (n *natNode) State(ctx context.Context) string {
	if n.mode == "xlane" {
		out, err := n.cli(ctx, "-o", "json", "ct", "stats")
		if err != nil {
			return "ct stats: " + err.Error()
		}
		var st api.CTStats
		if json.Unmarshal([]byte(out), &st) != nil {
			return out
		}
		return fmt.Sprintf("xlane_ct %d/%d entries, table_full_packets %d, gc runs %d (%d collected)",
			st.Entries, st.MaxEntries, st.TableFull, st.GCRuns, st.GCDeleted)
	}
	v, err := harness.Run(ctx, harness.NSExec(n.node, "cat", "/proc/sys/net/netfilter/nf_conntrack_count")...)
	if err != nil {
		return "nf_conntrack_count: " + err.Error()
	}
	return "nf_conntrack_count " + strings.TrimSpace(v)
}

// kubeProxyHash is kube-proxy's chain-name hash: base32 of SHA-256, 16
// characters.
func kubeProxyHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:])[:16]
}

// kubeProxyRules is the ruleset kube-proxy's iptables mode (v1.28-v1.31)
// writes for ClusterIP services: KUBE-SERVICES matches each cluster IP and
// jumps to the service's KUBE-SVC chain, which picks an endpoint's
// KUBE-SEP chain with -m statistic --mode random, which DNATs; hairpin
// traffic is marked for masquerade in KUBE-POSTROUTING; KUBE-FORWARD
// accepts established flows. Rules for NodePorts, load balancers and
// endpoint-less services are left out (none exist here).
func kubeProxyRules(svcs []natSvc, podCIDR string) string {
	// kube-proxy's "large cluster mode" (pkg/proxy/iptables,
	// largeClusterEndpointsThreshold): above 1,000 endpoints in all, the
	// rules of the endpoint chains and the jumps to them carry no comment,
	// which shrinks the table by about 40 %. Without it a legacy nat table
	// of 100,000 services would be ~660 MB (6.6 KB per service measured),
	// past the kernel's limit for one table (XT_MAX_TABLE_SIZE, 512 MiB).
	endpoints := 0
	for _, s := range svcs {
		endpoints += len(s.backends)
	}
	comment := func(c string) string {
		if endpoints > kubeProxyLargeClusterEndpoints {
			return ""
		}
		return fmt.Sprintf(` -m comment --comment "%s"`, c)
	}
	var chains, rules []string
	for _, s := range svcs {
		spn := "bench/" + s.name + ":http"
		svcChain := "KUBE-SVC-" + kubeProxyHash(spn+"tcp")
		chains = append(chains, ":"+svcChain+" - [0:0]")
		vip := s.vip.Addr().String()
		rules = append(rules,
			fmt.Sprintf(`-A KUBE-SERVICES -d %s/32 -p tcp -m comment --comment "%s cluster IP" -m tcp --dport %d -j %s`, vip, spn, s.vip.Port(), svcChain),
			fmt.Sprintf(`-A %s ! -s %s -d %s/32 -p tcp -m comment --comment "%s cluster IP" -m tcp --dport %d -j KUBE-MARK-MASQ`, svcChain, podCIDR, vip, spn, s.vip.Port()))
		for j, b := range s.backends {
			sep := "KUBE-SEP-" + kubeProxyHash(spn+"tcp"+b.String())
			chains = append(chains, ":"+sep+" - [0:0]")
			if left := len(s.backends) - j; left > 1 {
				rules = append(rules, fmt.Sprintf(`-A %s%s -m statistic --mode random --probability %0.11f -j %s`,
					svcChain, comment(spn+" -> "+b.String()), 1.0/float64(left), sep))
			} else {
				rules = append(rules, fmt.Sprintf(`-A %s%s -j %s`, svcChain, comment(spn+" -> "+b.String()), sep))
			}
			rules = append(rules,
				fmt.Sprintf(`-A %s -s %s/32%s -j KUBE-MARK-MASQ`, sep, b.Addr(), comment(spn)),
				fmt.Sprintf(`-A %s -p tcp%s -m tcp -j DNAT --to-destination %s`, sep, comment(spn), b))
		}
	}
	var sb strings.Builder
	sb.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-FORWARD - [0:0]\n")
	sb.WriteString(`-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`)
	sb.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	sb.WriteString(":KUBE-SERVICES - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-NODEPORTS - [0:0]\n")
	for _, c := range chains {
		sb.WriteString(c + "\n")
	}
	sb.WriteString(`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
`)
	for _, r := range rules {
		sb.WriteString(r + "\n")
	}
	sb.WriteString(`-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS` + "\nCOMMIT\n")
	return sb.String()
}
