// Command multinode is the write-up's two scenarios (issue 16), measured
// interleaved in one run with same-run ratios against Linux.
//
// Scenario 2: pod to pod across two nodes whose pods have their own
// subnets, joined by VXLAN. Three setups, each on its own pair of node
// namespaces and underlay bridge, against Linux's VXLAN device with
// routing (flannel-style):
//
//	xlane-tc      xlaned on each node (--node-name, --routing vxlan), network in tc mode,
//	              encapsulation auto (--overlay-encap: what auto resolves to)
//	xlane-tc-device  xlane-tc with --overlay-encap device: the tc program sets
//	              the tunnel key and the VXLAN device encapsulates
//	xlane-tc-bpf  (only when asked for) xlane-tc with --overlay-encap bpf: the
//	              tc program pushes the outer headers (with auto = bpf, the
//	              same as xlane-tc)
//	linux-vxlan   a VXLAN device per node, routes and fdb/neighbour entries per peer,
//	              pods on routed veths (flannel's vxlan backend)
//	linux-bridge  the same VXLAN routing, pods on a Linux bridge with iptables
//	              FORWARD rules and conntrack (Docker-style)
//	xlane-xdp     (only when asked for, -setups) xlane-tc's cluster with the
//	              network in xdp mode (cross-node packets handed to tc,
//	              pass_overlay): with xlane-tc, the issue's "tc and the
//	              fastest mode"
//	xlane-tc-fw   (only when asked for, -setups) xlane-tc with a firewall rule
//	              set on node 2 (a to-endpoint rule the traffic does not match):
//	              a new flow from the overlay takes the Linux path to the
//	              pod's firewall stage, its later packets the fast path
//	xlane-tc-uplink, xlane-tc-uplink-native, xlane-tc-uplink-generic
//	              (only when asked for) xlane-tc with --uplink ul0 (as
//	              bench/k8s starts it), the uplink program attached in auto
//	              mode (generic on a veth), native, generic: native XDP on
//	              the veth takes TSO from its bridge port (docs/multinode.md)
//	xlane-tc-wg, linux-wg, linux-wg-vxlan
//	              (only when asked for) encrypted between the nodes with
//	              WireGuard: xlane-tc with --encryption wireguard, and Linux
//	              routing over a wireguard-go device (wireguard.go)
//
// Every path gets, per repetition: iperf3 with 1 and 8 streams (from the
// pod on node 1 to the pod on node 2 in scenario 2) with the machine's
// CPU-seconds per Gbit moved (measure.CPUPerGbit: /proc/stat, all CPUs,
// softirq included), and TCP_RR: sockperf ping-pong, 64-byte messages,
// round trips (--full-rtt), client and server on CPU 0: transactions a
// second and the round trip's p50/p99.
//
// Scenario 1: one node's paths, xlane against Linux for each
// (scenario1.go): l2, l3, l3-nat on a node of their own, nat-vxlan (a
// service VIP on node 1 whose backend is node 2's pod) on the xlane-tc
// and linux-vxlan setups of scenario 2, and vlan-vxlan (vlan.go: a host on
// VLAN 100 of node 1's uplink to a pod on node 2; xlane only where the
// kernel has no 802.1Q, the reason printed).
//
//	go run ./bench/multinode -out bench/results   # 3 reps, 5 s runs
//	go run ./bench/multinode -quick -out ""       # 1 rep, 2 s runs, no files
//
// It needs root, iperf3, sockperf, taskset, iptables and nsenter;
// everything it makes is named xlbm-<random>-* and removed on exit, ^C
// included.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// setups run by default; allSetups can be asked for.
var (
	setups    = []string{"xlane-tc", "xlane-tc-device", "linux-vxlan", "linux-bridge", "xlane-tc-wg", "linux-wg", "linux-wg-vxlan"}
	allSetups = append(setups[:len(setups):len(setups)], "xlane-tc-bpf", "xlane-xdp", "xlane-tc-fw", "xlane-tc-uplink", "xlane-tc-uplink-native", "xlane-tc-uplink-generic")
)

type options struct {
	harness.RunFlags
	setups    []string
	streams   []int
	scenarios []int
	hold      bool
}

func parseFlags() (options, error) {
	var o options
	var which, streams, scenarios string
	o.Register(flag.CommandLine, harness.RunFlagsUsage{
		Quick:           "development run: 1 repetition of 2 s (unless -reps/-duration are given)",
		Reps:            "repetitions; each runs every setup once, interleaved",
		Duration:        "length of each iperf3 and sockperf run (whole seconds)",
		DefaultDuration: 5 * time.Second,
		Out:             "directory for multinode-<date>.json and multinode-latest.md",
		DefaultOut:      "bench/results",
		KeepTmp:         "keep the temp dir (logs)",
	})
	flag.StringVar(&which, "setups", strings.Join(setups, ","), "setups to compare ("+strings.Join(allSetups, ", ")+")")
	flag.StringVar(&streams, "streams", "1,8", "iperf3 parallel streams, one run each")
	flag.BoolVar(&o.hold, "hold", false, "build the setups, start their servers, print each path's iperf3 command and wait for ^C instead of measuring (for profiling one path by hand)")
	flag.StringVar(&scenarios, "scenarios", "1,2", "the write-up's scenarios to run (1: one node's paths, 2: pod to pod across nodes)")
	if err := o.Parse(flag.CommandLine, os.Args[1:], map[string]string{"reps": "1", "duration": "2s"}); err != nil {
		return o, err
	}
	if o.Reps < 1 || o.Duration < time.Second {
		return o, errors.New("-reps must be >= 1 and -duration >= 1s")
	}
	var err error
	if o.setups, err = harness.ParseChoices("setups", which, allSetups); err != nil {
		return o, err
	}
	if o.streams, err = harness.ParseLevels(streams, 128, false); err != nil {
		return o, err
	}
	sc, err := harness.ParseChoices("scenarios", scenarios, []string{"1", "2"})
	for _, x := range sc {
		o.scenarios = append(o.scenarios, int(x[0]-'0'))
	}
	return o, err
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench multinode: ")
	o, err := parseFlags()
	if err != nil {
		log.Print(err)
		os.Exit(2)
	}
	for _, tool := range []string{"go", "iperf3", "sockperf", "taskset", "iptables", "nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			log.Printf("%s not found (scripts/deps.sh installs what the benchmarks need)", tool)
			os.Exit(1)
		}
	}
	os.Exit(harness.Main("multinode", o.KeepTmp, func(ctx context.Context, tmp string, undo *harness.UndoStack) error {
		return run(ctx, o, tmp, undo)
	}))
}

// result is one iperf3 run.
type result struct {
	Scenario int
	Path     string // scenario 1's path; "pod-pod" in scenario 2
	Setup    string
	Streams  int
	Rep      int
	Gbps     float64
	Retr     int64
	// CPUSeconds is the whole machine's busy CPU time over the run
	// (/proc/stat), CPUPerGbit that per Gbit received.
	CPUSeconds, CPUPerGbit float64
}

// rrResult is one TCP_RR run (sockperf ping-pong, round trips).
type rrResult struct {
	Scenario            int
	Path, Setup         string
	Rep                 int
	PerSec              float64 // transactions a second
	AvgUs, P50Us, P99Us float64 // round trip
}

type report struct {
	harness.RunHeader
	Results []result
	RR      []rrResult
	Notes   []string
}

// cluster is one setup's two nodes: pod addresses and namespaces.
type cluster struct {
	setup string
	ul    string    // the underlay bridge's namespace
	nodes [2]string // namespaces
	dirs  [2]string // xlaned state dirs (xlane setups)
	pods  [2]string // namespaces
	podIP [2]string
	vip   string // a service VIP on node 1 for node 2's pod's iperf3 and sockperf ports
}

// vipAddr is every setup's service VIP (iperf3's port 5201, sockperf's 11111).
const vipAddr = "10.96.0.10"

const (
	iperfPort = 5201
	rrPort    = 11111
	rrSize    = 64  // TCP_RR message size, bytes
	rrCPU     = "0" // sockperf client and server (taskset), as bench/docker and bench/accel
)

func has(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func run(ctx context.Context, o options, tmp string, undo *harness.UndoStack) error {
	bins, runID, err := harness.PrepareRun(ctx, tmp, "*")
	if err != nil {
		return err
	}
	runID = strings.Replace(runID, "xlb-", "xlbm-", 1)
	log.Printf("this run's namespaces and pin dirs are named %s-* (not xlb-)", runID)
	rep := report{RunHeader: harness.RunHeader{Started: time.Now(), Kernel: harness.KernelRelease(),
		CPU: harness.CPUModel(), NProc: runtime.NumCPU(), LoadStart: harness.LoadAvg(),
		Options: map[string]string{"reps": fmt.Sprint(o.Reps), "duration": o.Duration.String(), "streams": fmt.Sprint(o.streams)}}}
	var cs []*cluster
	for i, s := range o.setups {
		c, err := build(ctx, undo, tmp, bins, fmt.Sprintf("%s-%d", runID, i), s)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		cs = append(cs, c)
	}
	var ps []*path1
	if has(o.scenarios, 1) {
		if ps, err = buildScenario1(ctx, undo, tmp, bins, runID+"-s1"); err != nil {
			return fmt.Errorf("scenario 1: %w", err)
		}
		for _, c := range cs {
			if impl := map[string]string{"xlane-tc": "xlane-tc", "linux-vxlan": "linux"}[c.setup]; impl != "" {
				ps = append(ps, &path1{impl: impl, path: "nat-vxlan", client: c.pods[0], server: c.pods[1], dst: c.vip, bind: c.podIP[1]})
			}
		}
		vp, note, err := buildVLAN(ctx, undo, tmp, bins, runID+"-v")
		if err != nil {
			return fmt.Errorf("scenario 1 vlan-vxlan: %w", err)
		}
		ps = append(ps, vp...)
		rep.Notes = append(rep.Notes, note)
		log.Print(note)
	}
	servers := map[string]bool{}
	server := func(ns, bind string) error {
		if servers[ns+bind] {
			return nil
		}
		servers[ns+bind] = true
		return startServers(ctx, undo, ns, bind)
	}
	throughput := func(r, scenario int, path, setup, client, server_, dst, bind string, n int) error {
		if err := server(server_, bind); err != nil {
			return err
		}
		c0, err := measure.ReadCPU()
		if err != nil {
			return err
		}
		res, err := iperf(ctx, client, dst, n, o.Duration)
		if err != nil {
			return fmt.Errorf("%s %s, %d streams: %w", setup, path, n, err)
		}
		c1, err := measure.ReadCPU()
		if err != nil {
			return err
		}
		g := res.ReceivedBps / 1e9
		x := result{Scenario: scenario, Path: path, Setup: setup, Streams: n, Rep: r, Gbps: g, Retr: res.Retransmits,
			CPUSeconds: measure.CPUSeconds(c0, c1), CPUPerGbit: measure.CPUPerGbit(c0, c1, g*res.Seconds)}
		log.Printf("rep %d s%d %-10s %-12s P%-2d %6.2f Gbit/s %6.3f CPU-s/Gbit (%d retransmits)", r+1, scenario, path, setup, n, g, x.CPUPerGbit, x.Retr)
		rep.Results = append(rep.Results, x)
		return nil
	}
	rr := func(r, scenario int, path, setup, client, server_, dst, bind string) error {
		if err := server(server_, bind); err != nil {
			return err
		}
		l, err := pingPong(ctx, client, dst, o.Duration)
		if err != nil {
			return fmt.Errorf("%s %s, TCP_RR: %w", setup, path, err)
		}
		log.Printf("rep %d s%d %-10s %-12s RR  %8.0f trans/s  RTT p50 %6.1f µs p99 %7.1f µs", r+1, scenario, path, setup, l.PerSec, l.P50Us, l.P99Us)
		rep.RR = append(rep.RR, rrResult{scenario, path, setup, r, l.PerSec, l.AvgUs, l.P50Us, l.P99Us})
		return nil
	}
	if o.hold {
		return hold(ctx, cs, ps, server)
	}
	for r := 0; r < o.Reps; r++ {
		for _, n := range o.streams {
			if has(o.scenarios, 2) {
				for _, c := range cs {
					if err := throughput(r, 2, "pod-pod", c.setup, c.pods[0], c.pods[1], c.podIP[1], c.podIP[1], n); err != nil {
						return err
					}
				}
			}
			for _, p := range ps {
				if err := throughput(r, 1, p.path, p.impl, p.client, p.server, p.dst, p.bind, n); err != nil {
					return err
				}
			}
		}
		if has(o.scenarios, 2) {
			for _, c := range cs {
				if err := rr(r, 2, "pod-pod", c.setup, c.pods[0], c.pods[1], c.podIP[1], c.podIP[1]); err != nil {
					return err
				}
			}
		}
		for _, p := range ps {
			if err := rr(r, 1, p.path, p.impl, p.client, p.server, p.dst, p.bind); err != nil {
				return err
			}
		}
	}
	rep.Finished, rep.LoadEnd = time.Now(), harness.LoadAvg()
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return harness.PrintResults(o.Out, "multinode", rep.Started, rep.markdown(o), js)
}

// hold starts every path's servers, prints how to reach each and waits
// for ^C (-hold).
func hold(ctx context.Context, cs []*cluster, ps []*path1, server func(ns, bind string) error) error {
	for _, c := range cs {
		ps = append(ps, &path1{impl: c.setup, path: "pod-pod", client: c.pods[0], server: c.pods[1], dst: c.podIP[1], bind: c.podIP[1]})
	}
	for _, p := range ps {
		if err := server(p.server, p.bind); err != nil {
			return err
		}
		log.Printf("hold: %-10s %-12s ip netns exec %s iperf3 -c %s -p %d  (server in %s)", p.path, p.impl, p.client, p.dst, iperfPort, p.server)
	}
	for i, c := range cs {
		log.Printf("hold: setup %d %s: nodes %s %s, underlay bridge %s", i, c.setup, c.nodes[0], c.nodes[1], c.ul)
	}
	log.Print("hold: ^C (SIGINT/SIGTERM) to tear down")
	<-ctx.Done()
	return nil
}

// startServers starts iperf3 and sockperf (on CPU rrCPU) in ns, bound to
// bind, and waits until both listen.
func startServers(ctx context.Context, undo *harness.UndoStack, ns, bind string) error {
	for _, s := range []struct {
		name string
		port int
		argv []string
	}{
		{"iperf3", iperfPort, []string{"iperf3", "-s", "-B", bind, "-p", fmt.Sprint(iperfPort)}},
		{"sockperf", rrPort, []string{"taskset", "-c", rrCPU, "sockperf", "sr", "--tcp", "-i", bind, "-p", fmt.Sprint(rrPort)}},
	} {
		log := filepath.Join(os.TempDir(), ns+"-"+bind+"-"+s.name+".log")
		p, err := harness.StartProc(s.name+" server "+ns+" "+bind, log, harness.NSExec(ns, s.argv...)...)
		if err != nil {
			os.Remove(log)
			return err
		}
		// Undone in reverse: the server stops, then its log goes.
		undo.Push("remove "+log, func(context.Context) error { return os.Remove(log) })
		undo.Push("stop "+p.Name, p.Stop)
		ap, err := netip.ParseAddrPort(net.JoinHostPort(bind, fmt.Sprint(s.port)))
		if err != nil {
			return err
		}
		if err := harness.WaitFor(ctx, p.Name, 10*time.Second, p, func() bool { return harness.Listening(ctx, ns, ap) }); err != nil {
			return err
		}
	}
	return nil
}

func iperf(ctx context.Context, client, dst string, streams int, d time.Duration) (measure.IperfResult, error) {
	out, err := harness.Run(ctx, harness.NSExec(client, "iperf3", "-J", "-c", dst, "-p", fmt.Sprint(iperfPort),
		"-P", fmt.Sprint(streams), "-t", fmt.Sprint(int(d.Seconds())))...)
	res, perr := measure.ParseIperf3([]byte(out))
	if perr != nil {
		return res, errors.Join(err, perr)
	}
	return res, err
}

// pingPong is TCP_RR: sockperf ping-pong with rrSize-byte messages, round
// trips (--full-rtt), the client on CPU rrCPU.
func pingPong(ctx context.Context, client, dst string, d time.Duration) (measure.Latency, error) {
	out, err := harness.Run(ctx, harness.NSExec(client, "taskset", "-c", rrCPU, "sockperf", "pp", "--tcp", "-i", dst,
		"-p", fmt.Sprint(rrPort), "-m", fmt.Sprint(rrSize), "--full-rtt", "-t", fmt.Sprint(int(d.Seconds())))...)
	l, perr := measure.ParseSockperf(out)
	if perr != nil {
		return l, errors.Join(err, perr)
	}
	if !l.RTT || l.PerSec <= 0 {
		return l, fmt.Errorf("sockperf: no round trips or no rate (--full-rtt ignored?) in\n%s", out)
	}
	return l, err
}

// build makes one setup's underlay bridge, two nodes and a pod on each.
func build(ctx context.Context, undo *harness.UndoStack, tmp, bins, id, setup string) (*cluster, error) {
	ul, nodes := id+"-ul", [2]string{id + "-n1", id + "-n2"}
	c := &cluster{setup: setup, ul: ul, nodes: nodes, pods: [2]string{id + "-p1", id + "-p2"}}
	if err := harness.AddNamespaces(ctx, undo, ul, nodes[0], nodes[1], c.pods[0], c.pods[1]); err != nil {
		return nil, err
	}
	cmds := [][]string{{"ip", "-n", ul, "link", "add", "br0", "type", "bridge"}, {"ip", "-n", ul, "link", "set", "br0", "up"}}
	for i, n := range nodes {
		cmds = append(cmds,
			[]string{"ip", "-n", ul, "link", "add", fmt.Sprintf("p%d", i+1), "type", "veth", "peer", "name", "ul0", "netns", n},
			[]string{"ip", "-n", ul, "link", "set", fmt.Sprintf("p%d", i+1), "master", "br0", "up"},
			[]string{"ip", "-n", n, "addr", "add", fmt.Sprintf("192.168.88.%d/24", i+1), "dev", "ul0"},
			[]string{"ip", "-n", n, "link", "set", "ul0", "up"})
	}
	if err := harness.RunAll(ctx, cmds...); err != nil {
		return nil, err
	}
	switch setup {
	case "xlane-tc", "xlane-tc-device", "xlane-tc-bpf", "xlane-xdp", "xlane-tc-fw", "xlane-tc-uplink", "xlane-tc-uplink-native", "xlane-tc-uplink-generic", "xlane-tc-vlan", "xlane-tc-wg":
		return c, buildXlane(ctx, undo, tmp, bins, nodes, c, setup)
	case "linux-wg", "linux-wg-vxlan":
		return c, buildLinuxWG(ctx, undo, tmp, bins, c, setup == "linux-wg-vxlan")
	default:
		return c, buildLinux(ctx, nodes, c, setup == "linux-bridge")
	}
}

func buildXlane(ctx context.Context, undo *harness.UndoStack, tmp, bins string, nodes [2]string, c *cluster, setup string) error {
	fw := setup == "xlane-tc-fw"
	var uplink []string
	switch setup {
	case "xlane-tc-uplink", "xlane-tc-vlan":
		uplink = []string{"--uplink", "ul0"}
	case "xlane-tc-uplink-native":
		uplink = []string{"--uplink", "ul0", "--uplink-xdp-mode", "native"}
	case "xlane-tc-uplink-generic":
		uplink = []string{"--uplink", "ul0", "--uplink-xdp-mode", "generic"}
	case "xlane-tc-device":
		uplink = []string{"--overlay-encap", "device"}
	case "xlane-tc-bpf":
		uplink = []string{"--overlay-encap", "bpf"}
	case "xlane-tc-wg":
		// Strict: a session that fails drops the traffic (the run
		// fails) rather than measuring the cleartext fallback.
		uplink = []string{"--encryption", "wireguard", "--encryption-strict"}
	}
	dirs := &c.dirs
	for i, n := range nodes {
		dirs[i] = filepath.Join(tmp, n)
		if err := os.MkdirAll(dirs[i], 0o700); err != nil {
			return err
		}
		_, err := harness.StartXlaned(ctx, undo, harness.Xlaned{Name: "xlaned " + n, Netns: n, Bins: bins, Dir: dirs[i],
			PinDir: "/sys/fs/bpf/" + n, Timeout: 30 * time.Second,
			Args: append([]string{"--docker-plugin-socket=", "--node-name", fmt.Sprintf("n%d", i+1), "--cluster-cidr", "10.245.0.0/16"}, uplink...)})
		if err != nil {
			return err
		}
	}
	var keys [2]string
	if setup == "xlane-tc-wg" {
		var err error
		if keys, err = wgKeys(ctx, bins, *dirs); err != nil {
			return err
		}
	}
	for i, n := range nodes {
		for j := range nodes {
			args := []string{"node", "add", fmt.Sprintf("n%d", j+1),
				"--underlay", fmt.Sprintf("192.168.88.%d", j+1), "--pod-cidr", fmt.Sprintf("10.245.%d.0/24", j+1)}
			if keys[j] != "" {
				args = append(args, "--wg-public-key", keys[j])
			}
			if _, err := harness.Xlane(ctx, bins, dirs[i], args...); err != nil {
				return err
			}
		}
		// The VLAN setup's one network: on VLAN 100 of node 1's uplink,
		// node 2's pods behind VXLAN (the same name: the same VNI).
		network, create := "pods", []string{"network", "create", "pods", "--mode", "tc"}
		switch setup {
		case "xlane-xdp":
			create[len(create)-1] = "xdp"
		case "xlane-tc-vlan":
			network, create = "vl", []string{"network", "create", "vl", "--mode", "tc"}
			if i == 0 {
				create = append(create, "--vlan", fmt.Sprint(vlanID))
			}
		}
		if _, err := harness.Xlane(ctx, bins, dirs[i], create...); err != nil {
			return err
		}
		out, err := harness.Xlane(ctx, bins, dirs[i], "endpoint", "add", network, "--netns", c.pods[i], "-o", "json")
		if err != nil {
			return err
		}
		ep, err := harness.ParseEndpoint(out)
		if err != nil {
			return err
		}
		if len(ep.IPs) == 0 {
			return fmt.Errorf("endpoint on %s has no address", n)
		}
		c.podIP[i] = ep.IPs[0].String()
	}
	if fw {
		if _, err := harness.Xlane(ctx, bins, dirs[1], "fw", "add", "other", "--direction", "to-endpoint", "--proto", "tcp", "--dport", "9", "--action", "drop"); err != nil {
			return err
		}
	}
	if setup == "xlane-tc-vlan" {
		return nil
	}
	c.vip = vipAddr
	for name, port := range map[string]int{"iperf": iperfPort, "rr": rrPort} {
		if _, err := harness.Xlane(ctx, bins, dirs[0], "service", "create", name, "--vip", fmt.Sprintf("%s:%d", vipAddr, port),
			"--backend", fmt.Sprintf("%s:%d", c.podIP[1], port)); err != nil {
			return err
		}
	}
	return nil
}

// buildLinux is flannel's vxlan backend by hand: a VXLAN device per node,
// the peer's subnet routed via its VXLAN address with a permanent
// neighbour and fdb entry; pods on routed veths, or (bridge) on a Linux
// bridge with iptables FORWARD rules and conntrack.
func buildLinux(ctx context.Context, nodes [2]string, c *cluster, bridge bool) error {
	mac := [2]string{"02:00:5e:10:00:01", "02:00:5e:10:00:02"}
	for i, n := range nodes {
		peer := 1 - i
		sub := fmt.Sprintf("10.246.%d", i+1)
		c.podIP[i] = sub + ".2"
		if err := harness.RunAll(ctx, []string{"ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv4.ip_forward=1"}); err != nil {
			return err
		}
		if err := harness.FlannelVXLAN(ctx, n, "vx0", "ul0", fmt.Sprintf("192.168.88.%d", i+1), mac[i], sub, harness.FlannelPeer{
			Underlay: fmt.Sprintf("192.168.88.%d", peer+1), MAC: mac[peer], Subnet: fmt.Sprintf("10.246.%d", peer+1)}); err != nil {
			return err
		}
		cmds := [][]string{
			{"ip", "-n", n, "link", "add", "hp", "mtu", "1450", "type", "veth", "peer", "name", "eth0", "mtu", "1450", "netns", c.pods[i]},
			{"ip", "-n", c.pods[i], "addr", "add", c.podIP[i] + "/24", "dev", "eth0"},
			{"ip", "-n", c.pods[i], "link", "set", "eth0", "up"},
		}
		if bridge {
			cmds = append(cmds,
				[]string{"ip", "-n", n, "link", "add", "brp", "type", "bridge"},
				[]string{"ip", "-n", n, "addr", "add", sub + ".1/24", "dev", "brp"},
				[]string{"ip", "-n", n, "link", "set", "brp", "up"},
				[]string{"ip", "-n", n, "link", "set", "hp", "master", "brp", "up"},
				[]string{"ip", "netns", "exec", n, "iptables", "-A", "FORWARD", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"},
				[]string{"ip", "netns", "exec", n, "iptables", "-A", "FORWARD", "-i", "brp", "-j", "ACCEPT"},
				[]string{"ip", "netns", "exec", n, "iptables", "-A", "FORWARD", "-o", "brp", "-j", "ACCEPT"},
				[]string{"ip", "netns", "exec", n, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", sub + ".0/24", "!", "-d", "10.246.0.0/16", "-j", "MASQUERADE"})
		} else {
			cmds = append(cmds,
				[]string{"ip", "-n", n, "addr", "add", sub + ".1/32", "dev", "hp"},
				[]string{"ip", "-n", n, "link", "set", "hp", "up"},
				[]string{"ip", "-n", n, "route", "add", c.podIP[i] + "/32", "dev", "hp"})
		}
		cmds = append(cmds, []string{"ip", "-n", c.pods[i], "route", "add", "default", "via", sub + ".1"})
		if err := harness.RunAll(ctx, cmds...); err != nil {
			return err
		}
	}
	// The service VIP on node 1: DNAT to node 2's pod (iperf3's and
	// sockperf's ports), then routed over VXLAN; conntrack translates the
	// replies back.
	c.vip = vipAddr
	var cmds [][]string
	for _, port := range []int{iperfPort, rrPort} {
		cmds = append(cmds, []string{"ip", "netns", "exec", nodes[0], "iptables", "-t", "nat", "-A", "PREROUTING",
			"-d", vipAddr, "-p", "tcp", "--dport", fmt.Sprint(port), "-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", c.podIP[1], port)})
	}
	return harness.RunAll(ctx, cmds...)
}
