// Command bgp is the BGP speaker's benchmark (issue 29, docs/bgp.md):
// how fast xlaned's routes reach a real router, and what announcing
// many costs, against BIRD announcing the same routes from a file.
//
//	go run ./bench/bgp -out bench/results     # 1,000 services, 10,000 routes
//	go run ./bench/bgp -quick                 # 50 services, 500 routes: a smoke run
//
// One router (FRR's zebra and bgpd, Debian's frr, AS 65000) on a bridge
// with two speakers (AS 65001): xlaned --bgp-asn (its LB pool
// 198.18.0.0/18) and, for the reference, BIRD 2 (Debian's bird2)
// announcing static routes. The router's kernel table (zebra installs
// what its RIB selects; a route is there a few ms after the RIB has it)
// is read with netlink in its namespace:
//
//  1. service → route: -services services are created one at a time
//     (the API, then the route awaited); the time from the request to the
//     route in the router, p50 and p99, and of the API call alone (the
//     service programmed and stored: the rest is the speaker, BGP and the
//     router);
//  2. node lost: the node's port on the router's bridge goes down (no
//     FIN, no NOTIFICATION); the time until the router has withdrawn its
//     routes (the hold time, 9 s here, decides), then the link comes back
//     and the time until they are all back; then the same with BFD (the
//     peer added again with BFD, FRR's bfdd: 3 x 1 s decides);
//  3. many routes: services up to -routes in one apply; the time until the
//     router has them all; then xlaned restarted (--bgp-stop withdraw:
//     the router drops them first) and the time from its start until the
//     router has them all, its RSS with the speaker and, restarted once
//     more without --bgp-asn, without it (the difference is the speaker's);
//     (and when xlaned served its API: the rest is the speaker);
//     then BIRD started with the same prefixes as static routes from a
//     file: the time from its start until the router has them all, and
//     its RSS.
//
// It needs root, a bpffs, frr and bird2; it builds xlaned and xlane
// itself and removes its namespaces, processes and pin dirs on exit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	os.Exit(bgpMain(os.Args[1:]))
}

type options struct {
	harness.RunFlags
	services int
	routes   int
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bgp", flag.ContinueOnError)
	o.Register(fs, harness.RunFlagsUsage{
		Quick:    "50 services, 500 routes (unless given): a smoke run",
		Reps:     "(unused: one run)",
		Duration: "(unused)",
		Out:      "directory for bgp-<date>.json and bgp-latest.md (\"\": print only)",
		KeepTmp:  "keep the temp dir (binaries, daemon and router logs)",
	})
	fs.IntVar(&o.services, "services", 1000, "services created one at a time, each awaited in the router (service → route latency)")
	fs.IntVar(&o.routes, "routes", 10000, "LoadBalancer routes announced at once (at most 16,000), against BIRD reading them from a file")
	if err := o.Parse(fs, args, map[string]string{"services": "50", "routes": "500"}); err != nil {
		return o, err
	}
	if o.services < 1 || o.routes < o.services || o.routes > 16000 {
		return o, errors.New("-services >= 1, -routes from -services to 16000")
	}
	return o, nil
}

// Addresses: the bridge 192.168.90.0/24 (router .254, xlaned .1, BIRD .3),
// the pool 198.18.0.0/18 (service i: 198.18.0.0 + 1 + i).
var (
	pool     = netip.MustParsePrefix("198.18.0.0/18")
	podCIDR  = netip.MustParsePrefix("10.70.0.0/24")
	routerIP = "192.168.90.254"
)

func vip(i int) netip.Addr {
	b := pool.Addr().As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(i) + 1
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

type report struct {
	harness.RunHeader
	Services        int     `json:"services"`
	CreateP50ms     float64 `json:"create_to_route_p50_ms"`
	CreateP99ms     float64 `json:"create_to_route_p99_ms"`
	CreateMaxms     float64 `json:"create_to_route_max_ms"`
	APIP50ms        float64 `json:"create_api_p50_ms"`
	APIP99ms        float64 `json:"create_api_p99_ms"`
	NodeLostms      float64 `json:"node_lost_to_withdrawn_ms"`
	NodeBackms      float64 `json:"link_back_to_routes_back_ms"`
	BFDLostms       float64 `json:"bfd_node_lost_to_withdrawn_ms"`
	BFDBackms       float64 `json:"bfd_link_back_to_routes_back_ms"`
	Routes          int     `json:"routes"`
	ApplyToAllms    float64 `json:"apply_to_all_routes_ms"`
	XlanedStartms   float64 `json:"xlaned_start_to_all_routes_ms"`
	XlanedReadyms   float64 `json:"xlaned_start_to_ready_ms"`
	XlanedRSSKiB    int     `json:"xlaned_rss_kib"`
	XlanedNoBGPKiB  int     `json:"xlaned_without_bgp_rss_kib"`
	SpeakerKiB      int     `json:"speaker_rss_kib"`
	BIRDStartms     float64 `json:"bird_start_to_all_routes_ms"`
	BIRDRSSKiB      int     `json:"bird_rss_kib"`
	RouterFRRBGPRSS int     `json:"router_bgpd_rss_kib"`
}

func bgpMain(args []string) int {
	o, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		log.Print(err)
		return 2
	}
	if err := harness.Preflight("BPF, namespaces", true, "ip", "nsenter", "bird", "/usr/lib/frr/bgpd"); err != nil {
		log.Print(err)
		return 1
	}
	return harness.Main("bgp", o.KeepTmp, func(ctx context.Context, tmp string, undo *harness.UndoStack) error {
		rep, err := run(ctx, o, tmp, undo)
		if err != nil {
			return err
		}
		js, _ := json.MarshalIndent(rep, "", "  ")
		return harness.PrintResults(o.Out, "bgp", rep.Started, markdown(rep), js)
	})
}

func run(ctx context.Context, o options, tmp string, undo *harness.UndoStack) (*report, error) {
	rep := &report{RunHeader: harness.RunHeader{Started: time.Now(), NProc: runtime.NumCPU(), LoadStart: harness.LoadAvg(),
		Kernel: harness.KernelRelease(), CPU: harness.CPUModel(),
		Options: map[string]string{"services": strconv.Itoa(o.services), "routes": strconv.Itoa(o.routes)}},
		Services: o.services, Routes: o.routes}
	bins, runID, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return nil, err
	}
	rtr, node, ref := runID+"-rtr", runID+"-node", runID+"-ref"
	if err := harness.AddNamespaces(ctx, undo, rtr, node, ref); err != nil {
		return nil, err
	}
	if err := topology(ctx, rtr, node, ref); err != nil {
		return nil, err
	}
	router, err := startRouter(ctx, undo, tmp, rtr)
	if err != nil {
		return nil, err
	}
	watch, err := newRouteWatch(rtr)
	if err != nil {
		return nil, err
	}
	defer watch.close()

	xdir := filepath.Join(tmp, "node")
	if err := os.MkdirAll(xdir, 0o755); err != nil {
		return nil, err
	}
	x := harness.Xlaned{Name: "xlaned", Netns: node, Bins: bins, Dir: xdir, PinDir: "/sys/fs/bpf/" + node,
		Args: []string{"--uplink", "ul0", "--docker-plugin-socket=", "--bgp-asn", "65001", "--bgp-stop", "withdraw"}, Timeout: 60 * time.Second}
	xp, err := harness.StartXlaned(ctx, undo, x)
	if err != nil {
		return nil, err
	}
	c := api.NewClient(filepath.Join(xdir, "xlane.sock"))
	if _, err := c.CreateNetwork(ctx, api.NetworkCreate{Name: "pods", Subnets: []string{podCIDR.String()}}); err != nil {
		return nil, fmt.Errorf("create network: %w", err)
	}
	if _, err := c.CreateLBPool(ctx, model.LBPool{Name: "bench", CIDRs: []netip.Prefix{pool}}); err != nil {
		return nil, fmt.Errorf("create lb pool: %w", err)
	}
	if _, err := c.AddBGPPeer(ctx, model.BGPPeer{Address: netip.MustParseAddr(routerIP), ASN: 65000, HoldTime: 9}); err != nil {
		return nil, fmt.Errorf("add bgp peer: %w", err)
	}
	if _, err := watch.waitCount(ctx, 1, 60*time.Second, podCIDR); err != nil {
		return nil, fmt.Errorf("the pod CIDR in the router: %w", err)
	}

	// 1. Service → route, one at a time.
	log.Printf("%d services, one at a time", o.services)
	var lat, apiLat []time.Duration
	for i := range o.services {
		a := vip(i)
		start := time.Now()
		if _, err := c.CreateService(ctx, service(i)); err != nil {
			return nil, fmt.Errorf("create service %d: %w", i, err)
		}
		apiLat = append(apiLat, time.Since(start))
		at, err := watch.waitPrefix(ctx, netip.PrefixFrom(a, 32), 30*time.Second)
		if err != nil {
			return nil, err
		}
		lat = append(lat, at.Sub(start))
	}
	slices.Sort(lat)
	slices.Sort(apiLat)
	rep.CreateP50ms, rep.CreateP99ms, rep.CreateMaxms = ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(lat[len(lat)-1])
	rep.APIP50ms, rep.APIP99ms = ms(quantile(apiLat, 0.5)), ms(quantile(apiLat, 0.99))
	log.Printf("service → route in the router: p50 %.1f ms, p99 %.1f ms, max %.1f ms (the API call: p50 %.1f ms, p99 %.1f ms)",
		rep.CreateP50ms, rep.CreateP99ms, rep.CreateMaxms, rep.APIP50ms, rep.APIP99ms)

	// 2. Node lost: its bridge port down; without BFD, then with.
	if rep.NodeLostms, rep.NodeBackms, err = nodeLost(ctx, rtr, watch, o.services+1); err != nil {
		return nil, err
	}
	log.Printf("node lost → withdrawn in %.0f ms (hold time 9 s); link back → routes back in %.0f ms", rep.NodeLostms, rep.NodeBackms)
	if err := c.RemoveBGPPeer(ctx, routerIP); err != nil {
		return nil, err
	}
	if _, err := c.AddBGPPeer(ctx, model.BGPPeer{Address: netip.MustParseAddr(routerIP), ASN: 65000, HoldTime: 9, BFD: true}); err != nil {
		return nil, fmt.Errorf("add bgp peer with bfd: %w", err)
	}
	if err := waitBFD(ctx, c); err != nil {
		return nil, err
	}
	if _, err := watch.waitCount(ctx, o.services+1, 120*time.Second, pool, podCIDR); err != nil {
		return nil, fmt.Errorf("routes with bfd: %w", err)
	}
	if rep.BFDLostms, rep.BFDBackms, err = nodeLost(ctx, rtr, watch, o.services+1); err != nil {
		return nil, fmt.Errorf("with bfd: %w", err)
	}
	log.Printf("with BFD: node lost → withdrawn in %.0f ms; link back → routes back in %.0f ms", rep.BFDLostms, rep.BFDBackms)

	// 3. Many routes: the rest in one apply.
	var rest []api.ServiceCreate
	for i := o.services; i < o.routes; i++ {
		rest = append(rest, service(i))
	}
	start := time.Now()
	if _, err := c.ApplyServices(ctx, api.ServiceApply{Services: rest}); err != nil {
		return nil, fmt.Errorf("apply %d services: %w", len(rest), err)
	}
	at, err := watch.waitCount(ctx, o.routes, 300*time.Second, pool)
	if err != nil {
		return nil, err
	}
	rep.ApplyToAllms = ms(at.Sub(start))
	log.Printf("%d services applied → all %d routes in the router in %.0f ms", len(rest), o.routes, rep.ApplyToAllms)
	// xlaned restarted: --bgp-stop withdraw empties the router first.
	if err := xp.Stop(ctx); err != nil {
		return nil, err
	}
	if _, err := watch.waitCount(ctx, 0, 60*time.Second, pool); err != nil {
		return nil, fmt.Errorf("xlaned stopped: %w", err)
	}
	x.Adopt = true
	start = time.Now()
	if xp, err = harness.StartXlaned(ctx, undo, x); err != nil {
		return nil, err
	}
	rep.XlanedReadyms = ms(time.Since(start))
	if at, err = watch.waitCount(ctx, o.routes, 300*time.Second, pool); err != nil {
		return nil, err
	}
	rep.XlanedStartms = ms(at.Sub(start))
	rep.XlanedRSSKiB = rssKiB(xp.Pid())
	if err := xp.Stop(ctx); err != nil {
		return nil, err
	}
	if _, err := watch.waitCount(ctx, 0, 60*time.Second, pool); err != nil {
		return nil, fmt.Errorf("xlaned stopped: %w", err)
	}
	x.Args = slices.DeleteFunc(slices.Clone(x.Args), func(s string) bool { return strings.HasPrefix(s, "--bgp") || s == "65001" || s == "withdraw" })
	if xp, err = harness.StartXlaned(ctx, undo, x); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // settled as the run with the speaker was when measured
	rep.XlanedNoBGPKiB = rssKiB(xp.Pid())
	rep.SpeakerKiB = rep.XlanedRSSKiB - rep.XlanedNoBGPKiB
	if err := xp.Stop(ctx); err != nil {
		return nil, err
	}
	log.Printf("xlaned start → all %d routes in %.0f ms (serving after %.0f ms); RSS %d KiB, %d KiB without the speaker", o.routes, rep.XlanedStartms,
		rep.XlanedReadyms, rep.XlanedRSSKiB, rep.XlanedNoBGPKiB)

	// The reference: BIRD announcing the same prefixes from a file.
	start = time.Now()
	bp, err := startBIRD(ctx, undo, tmp, ref, o.routes)
	if err != nil {
		return nil, err
	}
	if at, err = watch.waitCount(ctx, o.routes, 300*time.Second, pool); err != nil {
		return nil, fmt.Errorf("BIRD's routes: %w", err)
	}
	rep.BIRDStartms = ms(at.Sub(start))
	rep.BIRDRSSKiB = rssKiB(bp.Pid())
	rep.RouterFRRBGPRSS = rssKiB(router.Pid())
	log.Printf("BIRD start → all %d routes in %.0f ms; its RSS %d KiB", o.routes, rep.BIRDStartms, rep.BIRDRSSKiB)
	rep.Finished, rep.LoadEnd = time.Now(), harness.LoadAvg()
	return rep, nil
}

// nodeLost takes the node's bridge port down and returns the time until
// the router has withdrawn all its routes, then brings it back and returns
// the time until the router has all n again.
func nodeLost(ctx context.Context, rtr string, watch *routeWatch, n int) (lost, back float64, err error) {
	start := time.Now()
	if _, err := harness.Run(ctx, "ip", "-n", rtr, "link", "set", "pnode", "down"); err != nil {
		return 0, 0, err
	}
	at, err := watch.waitCount(ctx, 0, 60*time.Second, pool, podCIDR)
	if err != nil {
		return 0, 0, fmt.Errorf("node lost: %w", err)
	}
	lost = ms(at.Sub(start))
	start = time.Now()
	if _, err := harness.Run(ctx, "ip", "-n", rtr, "link", "set", "pnode", "up"); err != nil {
		return 0, 0, err
	}
	if at, err = watch.waitCount(ctx, n, 120*time.Second, pool, podCIDR); err != nil {
		return 0, 0, fmt.Errorf("link back: %w", err)
	}
	return lost, ms(at.Sub(start)), nil
}

// waitBFD waits until the node's BFD session with the router is up.
func waitBFD(ctx context.Context, c *api.Client) error {
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := c.BGPStatus(ctx)
		if err != nil {
			return err
		}
		for _, p := range st.Peers {
			if last = p.State + ", bfd " + p.BFDState; p.State == "established" && p.BFDState == "up" {
				return nil
			}
		}
	}
	return fmt.Errorf("the BFD session not up after 60 s (%s)", last)
}

// service is the i-th service: its VIP in the pool, one backend (a pod
// address: nothing answers, the route is what is measured).
func service(i int) api.ServiceCreate {
	return api.ServiceCreate{Name: fmt.Sprintf("s%d", i), VIP: netip.AddrPortFrom(vip(i), 80).String(),
		Backends: []string{"10.70.0.2:8080"}}
}

// topology: the router's bridge with the node and the reference speaker.
func topology(ctx context.Context, rtr, node, ref string) error {
	cmds := [][]string{
		{"ip", "-n", rtr, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", rtr, "addr", "add", routerIP + "/24", "dev", "br0"},
		{"ip", "-n", rtr, "link", "set", "br0", "up"},
	}
	for _, s := range []struct{ ns, port, addr string }{{node, "pnode", "192.168.90.1/24"}, {ref, "pref", "192.168.90.3/24"}} {
		cmds = append(cmds,
			[]string{"ip", "-n", rtr, "link", "add", s.port, "type", "veth", "peer", "name", "ul0", "netns", s.ns},
			[]string{"ip", "-n", rtr, "link", "set", s.port, "master", "br0", "up"},
			[]string{"ip", "-n", s.ns, "addr", "add", s.addr, "dev", "ul0"},
			[]string{"ip", "-n", s.ns, "link", "set", "ul0", "up"})
	}
	for _, c := range cmds {
		if _, err := harness.Run(ctx, c...); err != nil {
			return err
		}
	}
	return nil
}

const frrConf = `frr defaults datacenter
hostname rtr
router bgp 65000
 bgp router-id 192.168.90.254
 no bgp ebgp-requires-policy
 bgp graceful-restart
 neighbor 192.168.90.1 remote-as 65001
 neighbor 192.168.90.1 timers 3 9
 neighbor 192.168.90.1 bfd
 neighbor 192.168.90.3 remote-as 65001
 address-family ipv4 unicast
  maximum-paths 8
 exit-address-family
`

// startRouter runs zebra, bfdd and bgpd (as the frr user, in a directory
// it may write) in ns; it returns bgpd.
func startRouter(ctx context.Context, undo *harness.UndoStack, tmp, ns string) (*harness.Proc, error) {
	dir := filepath.Join(tmp, "frr")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	os.Chmod(tmp, 0o755)
	os.Chmod(dir, 0o777)
	cfg := filepath.Join(dir, "frr.conf")
	if err := os.WriteFile(cfg, []byte(frrConf), 0o644); err != nil {
		return nil, err
	}
	zserv := filepath.Join(dir, "zserv.api")
	var bgpd *harness.Proc
	for _, d := range []string{"zebra", "bfdd", "bgpd"} {
		argv := []string{"/usr/lib/frr/" + d, "-f", cfg, "-i", filepath.Join(dir, d+".pid"), "-z", zserv,
			"--vty_socket", dir, "-u", "frr", "-g", "frr", "-P", "0"}
		switch d {
		case "bgpd":
			argv = append(argv, "-p", "179")
		case "bfdd":
			argv = append(argv, "--bfdctl", filepath.Join(dir, "bfdd.sock"))
		}
		p, err := harness.StartProc(d, filepath.Join(dir, d+".log"), harness.NSExec(ns, argv...)...)
		if err != nil {
			return nil, err
		}
		undo.Push("stop "+d, p.Stop)
		if d == "zebra" {
			if err := harness.WaitFor(ctx, "zebra", 10*time.Second, p, func() bool { _, err := os.Stat(zserv); return err == nil }); err != nil {
				return nil, err
			}
		}
		bgpd = p
	}
	return bgpd, nil
}

// startBIRD runs BIRD in ns announcing n prefixes of the pool (the same
// as the services') from a static file to the router.
func startBIRD(ctx context.Context, undo *harness.UndoStack, tmp, ns string, n int) (*harness.Proc, error) {
	dir := filepath.Join(tmp, "bird")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var routes strings.Builder
	for i := range n {
		fmt.Fprintf(&routes, "route %s/32 blackhole;\n", vip(i))
	}
	if err := os.WriteFile(filepath.Join(dir, "routes.conf"), []byte(routes.String()), 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`router id 192.168.90.3;
protocol device {}
protocol static {
  ipv4;
include %q;
}
protocol bgp rtr {
  local as 65001;
  neighbor %s as 65000;
  ipv4 { import none; export all; next hop self; };
}
`, filepath.Join(dir, "routes.conf"), routerIP)
	cfg := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := harness.StartProc("bird", filepath.Join(dir, "bird.log"),
		harness.NSExec(ns, "bird", "-f", "-c", cfg, "-s", filepath.Join(dir, "bird.ctl"), "-P", filepath.Join(dir, "bird.pid"))...)
	if err != nil {
		return nil, err
	}
	undo.Push("stop bird", p.Stop)
	// A configuration BIRD refuses ends it at once: fail then, not after
	// the wait for its routes.
	ctl := filepath.Join(dir, "bird.ctl")
	err = harness.WaitFor(ctx, "bird", 30*time.Second, p, func() bool {
		out, err := harness.Run(ctx, "birdc", "-s", ctl, "show", "status")
		return err == nil && strings.Contains(out, "Daemon is up and running")
	})
	return p, err
}

// routeWatch reads the router namespace's kernel table (zebra's routes,
// proto bgp) through netlink: route additions as they come, for the
// latencies; counts by listing, for the bulk phases.
type routeWatch struct {
	h    *netlink.Handle
	ns   netns.NsHandle
	ch   chan netlink.RouteUpdate
	done chan struct{}
	seen map[netip.Prefix]time.Time // additions read so far
}

func newRouteWatch(name string) (*routeWatch, error) {
	nsh, err := netns.GetFromPath(filepath.Join(harness.NetnsDir, name))
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		nsh.Close()
		return nil, err
	}
	w := &routeWatch{h: h, ns: nsh, ch: make(chan netlink.RouteUpdate, 1<<16), done: make(chan struct{}), seen: map[netip.Prefix]time.Time{}}
	err = netlink.RouteSubscribeWithOptions(w.ch, w.done, netlink.RouteSubscribeOptions{Namespace: &nsh, ReceiveBufferSize: 8 << 20})
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *routeWatch) close() {
	close(w.done)
	w.h.Close()
	w.ns.Close()
}

// waitPrefix waits for pfx's addition (a route event) and returns when it
// was read.
func (w *routeWatch) waitPrefix(ctx context.Context, pfx netip.Prefix, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		if at, ok := w.seen[pfx]; ok {
			return at, nil
		}
		select {
		case u, ok := <-w.ch:
			if !ok {
				return time.Time{}, errors.New("route events: subscription ended")
			}
			if u.Type == unix.RTM_NEWROUTE && u.Dst != nil {
				ones, _ := u.Dst.Mask.Size()
				if a, ok := netip.AddrFromSlice(u.Dst.IP); ok {
					w.seen[netip.PrefixFrom(a.Unmap(), ones)] = time.Now()
				}
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not in the router after %s", pfx, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// waitCount waits until the router's kernel has n proto-bgp routes inside
// the prefixes in, polling every 20 ms, and returns when it saw them.
func (w *routeWatch) waitCount(ctx context.Context, n int, timeout time.Duration, in ...netip.Prefix) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	got := -1
	for {
		rs, err := w.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: unix.RTPROT_BGP}, netlink.RT_FILTER_PROTOCOL)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return time.Time{}, err
		}
		if err == nil {
			now := time.Now()
			got = 0
			for _, r := range rs {
				if r.Dst == nil {
					continue
				}
				a, _ := netip.AddrFromSlice(r.Dst.IP)
				if slices.ContainsFunc(in, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) }) {
					got++
				}
			}
			if got == n {
				return now, nil
			}
		}
		// Keep the event channel drained meanwhile.
		for drained := false; !drained; {
			select {
			case <-w.ch:
			default:
				drained = true
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("router has %d routes after %s, want %d", got, timeout, n)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rssKiB is a process' resident set (VmRSS), 0 when unreadable.
func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func markdown(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# BGP speaker (bench/bgp)\n\n%s, %s, %d CPUs; %s; router FRR (zebra + bgpd), hold time 9 s.\n\n",
		r.Started.UTC().Format(time.RFC3339), r.Kernel, r.NProc, r.CPU)
	b.WriteString("| measure | xlaned (GoBGP) | BIRD from a file |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| service created → route in the router, p50 / p99 / max (%d services) | %.1f / %.1f / %.1f ms | |\n",
		r.Services, r.CreateP50ms, r.CreateP99ms, r.CreateMaxms)
	fmt.Fprintf(&b, "| of which the API call (service programmed and stored), p50 / p99 | %.1f / %.1f ms | |\n", r.APIP50ms, r.APIP99ms)
	fmt.Fprintf(&b, "| node lost → its routes withdrawn (hold time 9 s) | %.0f ms | |\n", r.NodeLostms)
	fmt.Fprintf(&b, "| link back → its routes back | %.0f ms | |\n", r.NodeBackms)
	fmt.Fprintf(&b, "| with BFD (3 x 1 s): node lost → withdrawn; link back → routes back | %.0f ms; %.0f ms | |\n", r.BFDLostms, r.BFDBackms)
	fmt.Fprintf(&b, "| %d services applied → all routes in the router | %.0f ms | |\n", r.Routes-r.Services, r.ApplyToAllms)
	fmt.Fprintf(&b, "| start → all %d routes in the router | %.0f ms (xlaned's whole start; serving after %.0f ms) | %.0f ms |\n",
		r.Routes, r.XlanedStartms, r.XlanedReadyms, r.BIRDStartms)
	fmt.Fprintf(&b, "| memory (RSS) with %d routes | xlaned %d KiB, %d KiB without --bgp-asn: the speaker %d KiB | %d KiB |\n",
		r.Routes, r.XlanedRSSKiB, r.XlanedNoBGPKiB, r.SpeakerKiB, r.BIRDRSSKiB)
	fmt.Fprintf(&b, "\nThe router's bgpd: %d KiB RSS at the end. Load average %s at the start, %s at the end.\n",
		r.RouterFRRBGPRSS, r.LoadStart, r.LoadEnd)
	return b.String()
}
