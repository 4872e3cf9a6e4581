// Command multinode is the write-up's two scenarios (issue 16), measured
// interleaved in one run with same-run ratios against Linux.
//
// Scenario 2: pod to pod across two nodes whose pods have their own
// subnets, joined by VXLAN. Three setups, each on its own pair of node
// namespaces and underlay bridge, against Linux's VXLAN device with
// routing (flannel-style):
//
//	xlane-tc      xlaned on each node (--node-name, --routing vxlan), network in tc mode
//	linux-vxlan   a VXLAN device per node, routes and fdb/neighbour entries per peer,
//	              pods on routed veths (flannel's vxlan backend)
//	linux-bridge  the same VXLAN routing, pods on a Linux bridge with iptables
//	              FORWARD rules and conntrack (Docker-style)
//	xlane-tc-fw   (only when asked for, -setups) xlane-tc with a firewall rule
//	              set on node 2 (a to-endpoint rule the traffic does not match):
//	              a new flow from the overlay takes the Linux path to the
//	              pod's firewall stage, its later packets the fast path
//	xlane-tc-uplink, xlane-tc-uplink-native, xlane-tc-uplink-generic
//	              (only when asked for) xlane-tc with --uplink ul0 (as
//	              bench/k8s starts it), the uplink program attached in auto
//	              mode (generic on a veth), native, generic: native XDP on
//	              the veth takes TSO from its bridge port (docs/multinode.md)
//
// iperf3 with 1 and 8 streams from the pod on node 1 to the pod on node 2.
//
// Scenario 1: one node's paths, xlane against Linux for each
// (scenario1.go): l2, l3, l3-nat on a node of their own, and nat-vxlan
// (a service VIP on node 1 whose backend is node 2's pod) on the
// xlane-tc and linux-vxlan setups of scenario 2.
//
//	go run ./bench/multinode -out bench/results   # 3 reps, 5 s runs
//	go run ./bench/multinode -quick               # 1 rep, 2 s runs
//
// It needs root, iperf3, iptables and nsenter; everything it makes is
// named xlbm-<random>-* and removed on exit, ^C included.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// setups run by default; allSetups can be asked for.
var (
	setups    = []string{"xlane-tc", "linux-vxlan", "linux-bridge"}
	allSetups = append(setups[:len(setups):len(setups)], "xlane-tc-fw", "xlane-tc-uplink", "xlane-tc-uplink-native", "xlane-tc-uplink-generic")
)

type options struct {
	harness.RunFlags
	setups    []string
	streams   []int
	scenarios []int
}

func parseFlags() (options, error) {
	var o options
	var which, streams, scenarios string
	o.Register(flag.CommandLine, harness.RunFlagsUsage{
		Quick:           "development run: 1 repetition of 2 s (unless -reps/-duration are given)",
		Reps:            "repetitions; each runs every setup once, interleaved",
		Duration:        "length of each iperf3 run (whole seconds)",
		DefaultDuration: 5 * time.Second,
		Out:             "directory for multinode-<date>.json and multinode-latest.md",
		DefaultOut:      "bench/results",
		KeepTmp:         "keep the temp dir (logs)",
	})
	flag.StringVar(&which, "setups", strings.Join(setups, ","), "setups to compare ("+strings.Join(allSetups, ", ")+")")
	flag.StringVar(&streams, "streams", "1,8", "iperf3 parallel streams, one run each")
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
	for _, tool := range []string{"go", "iperf3", "iptables", "nsenter", "ip"} {
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
}

type report struct {
	harness.RunHeader
	Results []result
}

// cluster is one setup's two nodes: pod addresses and namespaces.
type cluster struct {
	setup string
	pods  [2]string // namespaces
	podIP [2]string
	vip   string // a service VIP on node 1 for node 2's pod's iperf3 port
}

// vipAddr is every setup's service VIP (iperf3's port 5201).
const vipAddr = "10.96.0.10"

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
	rep := report{RunHeader: harness.RunHeader{Started: time.Now(), Kernel: harness.KernelRelease(),
		CPU: harness.CPUModel(), LoadStart: harness.LoadAvg(),
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
	}
	servers := map[string]bool{}
	measure := func(r, scenario int, path, setup, client, server, dst, bind string, n int) error {
		if !servers[server+bind] {
			if err := iperfServer(undo, server, bind); err != nil {
				return err
			}
			servers[server+bind] = true
		}
		g, retr, err := iperf(ctx, client, dst, n, o.Duration)
		if err != nil {
			return fmt.Errorf("%s %s, %d streams: %w", setup, path, n, err)
		}
		log.Printf("rep %d s%d %-9s %-12s P%-2d %6.2f Gbit/s (%d retransmits)", r+1, scenario, path, setup, n, g, retr)
		rep.Results = append(rep.Results, result{scenario, path, setup, n, r, g, retr})
		return nil
	}
	for r := 0; r < o.Reps; r++ {
		for _, n := range o.streams {
			if has(o.scenarios, 2) {
				for _, c := range cs {
					if err := measure(r, 2, "pod-pod", c.setup, c.pods[0], c.pods[1], c.podIP[1], c.podIP[1], n); err != nil {
						return err
					}
				}
			}
			for _, p := range ps {
				if err := measure(r, 1, p.path, p.impl, p.client, p.server, p.dst, p.bind, n); err != nil {
					return err
				}
			}
		}
	}
	rep.Finished, rep.LoadEnd = time.Now(), harness.LoadAvg()
	js, _ := json.MarshalIndent(rep, "", "  ")
	return harness.PrintResults(o.Out, "multinode", rep.Started, rep.markdown(o), js)
}

func (r *report) markdown(o options) string {
	var b strings.Builder
	med := map[string]float64{}
	for _, x := range r.Results {
		k := fmt.Sprint(x.Scenario, x.Path, x.Setup, x.Streams)
		if _, ok := med[k]; ok {
			continue
		}
		var v []float64
		for _, y := range r.Results {
			if fmt.Sprint(y.Scenario, y.Path, y.Setup, y.Streams) == k {
				v = append(v, y.Gbps)
			}
		}
		sort.Float64s(v)
		med[k] = v[len(v)/2]
	}
	table := func(scenario int, paths, setups []string, base string) {
		fmt.Fprintf(&b, "| path | setup | streams | Gbit/s | x %s |\n|---|---|---|---|---|\n", base)
		for _, p := range paths {
			for _, s := range setups {
				for _, n := range o.streams {
					g, ok := med[fmt.Sprint(scenario, p, s, n)]
					if !ok {
						continue
					}
					ratio := "-"
					if bg := med[fmt.Sprint(scenario, p, base, n)]; bg > 0 {
						ratio = fmt.Sprintf("%.2f", g/bg)
					}
					fmt.Fprintf(&b, "| %s | %s | %d | %.2f | %s |\n", p, s, n, g, ratio)
				}
			}
		}
	}
	if has(o.scenarios, 2) {
		fmt.Fprintf(&b, "# Scenario 2: pod to pod across two nodes over VXLAN\n\n%s, %s, %d reps of %s; medians, ratio to linux-vxlan in the same run\n\n",
			r.Kernel, r.CPU, o.Reps, o.Duration)
		table(2, []string{"pod-pod"}, o.setups, "linux-vxlan")
	}
	if has(o.scenarios, 1) {
		fmt.Fprintf(&b, "\n# Scenario 1: one node's paths, xlane against Linux\n\n%d reps of %s; medians, ratio to linux in the same run (nat-vxlan: a service VIP on node 1, its backend on node 2; VLAN to VXLAN not measured: no 802.1Q on this kernel)\n\n",
			o.Reps, o.Duration)
		table(1, append(paths1, "nat-vxlan"), []string{"xlane-tc", "linux"}, "linux")
	}
	return b.String()
}

// iperfServer starts iperf3 in ns, bound to bind.
func iperfServer(undo *harness.UndoStack, ns, bind string) error {
	log := filepath.Join(os.TempDir(), ns+"-"+bind+"-iperf3.log")
	p, err := harness.StartProc("iperf3 server "+ns+" "+bind, log, harness.NSExec(ns, "iperf3", "-s", "-B", bind)...)
	if err != nil {
		os.Remove(log)
		return err
	}
	// Undone in reverse: the server stops, then its log goes.
	undo.Push("remove "+log, func(context.Context) error { return os.Remove(log) })
	undo.Push("stop "+p.Name, p.Stop)
	time.Sleep(300 * time.Millisecond)
	return nil
}

func iperf(ctx context.Context, client, dst string, streams int, d time.Duration) (float64, int64, error) {
	out, err := harness.Run(ctx, harness.NSExec(client, "iperf3", "-J", "-c", dst, "-P", fmt.Sprint(streams), "-t", fmt.Sprint(int(d.Seconds())))...)
	if err != nil {
		return 0, 0, err
	}
	res, err := measure.ParseIperf3([]byte(out))
	return res.ReceivedBps / 1e9, res.Retransmits, err
}

// build makes one setup's underlay bridge, two nodes and a pod on each.
func build(ctx context.Context, undo *harness.UndoStack, tmp, bins, id, setup string) (*cluster, error) {
	ul, nodes := id+"-ul", [2]string{id + "-n1", id + "-n2"}
	c := &cluster{setup: setup, pods: [2]string{id + "-p1", id + "-p2"}}
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
	case "xlane-tc", "xlane-tc-fw", "xlane-tc-uplink", "xlane-tc-uplink-native", "xlane-tc-uplink-generic":
		return c, buildXlane(ctx, undo, tmp, bins, nodes, c, setup)
	default:
		return c, buildLinux(ctx, nodes, c, setup == "linux-bridge")
	}
}

func buildXlane(ctx context.Context, undo *harness.UndoStack, tmp, bins string, nodes [2]string, c *cluster, setup string) error {
	fw := setup == "xlane-tc-fw"
	var uplink []string
	switch setup {
	case "xlane-tc-uplink":
		uplink = []string{"--uplink", "ul0"}
	case "xlane-tc-uplink-native":
		uplink = []string{"--uplink", "ul0", "--uplink-xdp-mode", "native"}
	case "xlane-tc-uplink-generic":
		uplink = []string{"--uplink", "ul0", "--uplink-xdp-mode", "generic"}
	}
	var dirs [2]string
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
	for i, n := range nodes {
		for j := range nodes {
			if _, err := harness.Xlane(ctx, bins, dirs[i], "node", "add", fmt.Sprintf("n%d", j+1),
				"--underlay", fmt.Sprintf("192.168.88.%d", j+1), "--pod-cidr", fmt.Sprintf("10.245.%d.0/24", j+1)); err != nil {
				return err
			}
		}
		if _, err := harness.Xlane(ctx, bins, dirs[i], "network", "create", "pods", "--mode", "tc"); err != nil {
			return err
		}
		out, err := harness.Xlane(ctx, bins, dirs[i], "endpoint", "add", "pods", "--netns", c.pods[i], "-o", "json")
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
	c.vip = vipAddr
	_, err := harness.Xlane(ctx, bins, dirs[0], "service", "create", "iperf", "--vip", vipAddr+":5201", "--backend", c.podIP[1]+":5201")
	return err
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
	// The service VIP on node 1: DNAT to node 2's pod, then routed over
	// VXLAN; conntrack translates the replies back.
	c.vip = vipAddr
	return harness.RunAll(ctx, []string{"ip", "netns", "exec", nodes[0], "iptables", "-t", "nat", "-A", "PREROUTING",
		"-d", vipAddr, "-p", "tcp", "--dport", "5201", "-j", "DNAT", "--to-destination", c.podIP[1] + ":5201"})
}
