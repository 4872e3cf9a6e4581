package e2e

// bench/peers (issue 31): xlane against Cilium on the same cluster
// set-up, the same pods and workloads, in one run. `make bench
// BENCH=peers` runs TestPeers; bench/peers (package peers) has the report
// and the options.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlane-dev/xlane/bench/peers"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

// The benchmark's helpers run as the test binary itself (in a pod's
// namespace and cgroup): the connection-rate client and server.
const peersHelperEnv = "XLANE_PEERS_HELPER"

func init() {
	switch os.Getenv(peersHelperEnv) {
	case "conn-client":
		os.Exit(connrate.Client(os.Args[1:]))
	case "conn-server":
		os.Exit(connrate.Server(os.Args[1:]))
	case "probe-change":
		os.Exit(connrate.ProbeChange(os.Args[1:]))
	}
}

// Ports of the servers in the server pods.
const (
	peersIperfPort    = 5201
	peersSockperfPort = 11111
	peersConnPort     = 20000
)

// peerSetup is one network on its own two-node cluster with the
// benchmark's pods: client and local on node 1, remote on node 2, and a
// ClusterIP Service whose one endpoint is remote's connection server.
type peerSetup struct {
	info                  peers.Setup
	client, local, remote *benchPod
	vip                   netip.AddrPort
	agents                []int    // the nodes' agent pids (xlaned, cilium-agent)
	pinRoots              []string // where each agent pins (in its mount namespace)
	ready                 []time.Duration
	// cp is the setup's control plane, outside the namespace of its API
	// server on the underlay (the NodePort row's client), nodes its two
	// kubelet nodes.
	cp      *controlPlane
	outside string
	nodes   []*kubeletNode
	// nodePort: node 1's underlay address and the NodePort Service's port
	// (its endpoint the remote pod's connection server).
	nodePort netip.AddrPort
	// probeVIP: the first of the 10,000 Services (peers-s00000), whose
	// EndpointSlice the change rows move.
	probeVIP netip.AddrPort
}

// TestPeers is bench/peers: every setup of XLANE_PEERS_SETUPS (default
// xlane-native, xlane-vxlan, cilium-native, cilium-vxlan) on a cluster of
// its own, all at once; XLANE_PEERS_REPS repetitions (default 3) of every
// row on every setup, rotated; XLANE_PEERS_SECONDS per throughput, rate
// and latency row (default 10); the report written into XLANE_PEERS_OUT
// (bench/results; "": printed only).
func TestPeers(t *testing.T) {
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	reps, err := strconv.Atoi(env("XLANE_PEERS_REPS", "3"))
	if err != nil || reps < 1 {
		t.Fatalf("XLANE_PEERS_REPS=%q: want a count ≥ 1", os.Getenv("XLANE_PEERS_REPS"))
	}
	secs, err := strconv.Atoi(env("XLANE_PEERS_SECONDS", "10"))
	if err != nil || secs < 1 {
		t.Fatalf("XLANE_PEERS_SECONDS=%q: want seconds ≥ 1", os.Getenv("XLANE_PEERS_SECONDS"))
	}
	names := strings.Split(env("XLANE_PEERS_SETUPS", "xlane-native,xlane-vxlan,cilium-native,cilium-vxlan"), ",")
	bins := k8sBins(t, "kube-apiserver", "xlane-etcd", "kubelet", "kube-controller-manager")
	var cdir string
	for _, n := range names {
		if strings.HasPrefix(strings.TrimSpace(n), "cilium-") && cdir == "" {
			cdir = ciliumDir(t)
		}
	}
	for _, tool := range []string{"iperf3", "sockperf", "bash", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (scripts/deps.sh installs it)", tool)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rep := &peers.Report{Started: time.Now(), Kernel: kernelRelease(t), NProc: runtime.NumCPU(), LoadStart: loadAvg(),
		Reps: reps, Seconds: float64(secs)}
	var setups []*peerSetup
	for _, name := range names {
		began := time.Now()
		s := startPeerSetup(t, bins, cdir, self, strings.TrimSpace(name))
		t.Logf("setup %s up in %v", s.info.Name, time.Since(began).Round(time.Millisecond))
		setups = append(setups, s)
		rep.Setups = append(rep.Setups, s.info)
	}
	d := time.Duration(secs) * time.Second
	for r := 1; r <= reps; r++ {
		for k := range setups {
			s := setups[(k+r-1)%len(setups)]
			s.measure(t, rep, r, d, self)
		}
	}
	for _, s := range setups {
		rep.Add(s.info.Name, "agent RSS, 1 Service", 1, s.rss(t))
		s.bpfMaps(t, rep, "agent BPF map memory, 1 Service")
	}
	peersPolicyPhase(t, rep, setups, reps, d, self)
	if os.Getenv("XLANE_PEERS_SCALE") != "0" { // 0: without the 10,000 Services (~2 min a setup)
		peersScalePhase(t, rep, setups, reps, d, self)
	}
	for _, s := range setups {
		for _, r := range s.ready {
			rep.Add(s.info.Name, "agent start to ready", 1, r.Seconds())
		}
	}
	rep.Finished, rep.LoadEnd = time.Now(), loadAvg()
	out := os.Getenv("XLANE_PEERS_OUT")
	var md string
	if out != "" {
		md, err = rep.Write(out)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("results in %s (peers-latest.md)", out)
	} else {
		md = rep.Markdown()
	}
	t.Logf("\n%s", md)
}

// startPeerSetup starts setup name's cluster, pods, servers and Service
// and checks that every path measured works.
func startPeerSetup(t *testing.T, bins, cdir, self, name string) *peerSetup {
	t.Helper()
	base, variant, gso, bigTCP := peersVariant(t, name)
	peer, routing, ok := strings.Cut(base, "-")
	if !ok || (routing != "native" && routing != "vxlan") {
		t.Fatalf("XLANE_PEERS_SETUPS: %q: want xlane-native, xlane-vxlan, cilium-native or cilium-vxlan", name)
	}
	s := &peerSetup{info: peers.Setup{Name: name, Peer: peer, Routing: routing}}
	image := "docker.io/xlane-e2e/podserver:" + suffix()
	var cp *controlPlane
	var nodes []*kubeletNode
	switch peer {
	case "xlane":
		began := time.Now()
		kc := startKubeCluster(t, bins, clusterCIDR, false)
		cp = kc.cp
		for i := 1; i <= 2; i++ {
			nodes = append(nodes, startKubeletNode(t, bins, cp, kc.ul, i, image, kubeletOpts{xlanedFlags: append([]string{"--routing", routing}, variant...), podCgroups: true, uplinkGSO: gso}))
		}
		kc.waitNodes(t, nodes, began)
		s.outside = kc.cpNS
		// What a node on its defaults has before its first pod: the
		// calibration of its first start (--calibrate-at-start, off in
		// the tests' xlaned), here run to its end, one node after the
		// other, so that the pods' network (made at the first CNI ADD)
		// takes the mode and BIG TCP it chose, as Cilium's setups take
		// theirs (BIG TCP on where the kernel has it).
		for _, k := range nodes {
			var c api.Calibration
			if os.Getenv("XLANE_PEERS_CALIBRATE") != "0" { // 0: none, as the tests' xlaned
				k.node.mustXlane(&c, "calibrate")
			}
			if bigTCP != "" { // the CNI's first ADD finds it
				k.node.mustXlane(nil, "network", "create", "pods", "--mode", "tc", "--allow-unsolicited", "--big-tcp", bigTCP)
			}
			s.agents = append(s.agents, k.node.cmd.Process.Pid)
			s.pinRoots = append(s.pinRoots, k.node.pinDir)
			s.ready = append(s.ready, k.node.readyIn)
		}
		conf, _ := json.Marshal(deployConflist(t, "/run/xlane/xlane.sock"))
		s.info.Config = append([]string{"xlaned " + strings.Join(nodes[0].node.flags, " ")}, "CNI: "+string(conf))
	case "cilium":
		var v *ciliumVariant
		for i := range ciliumVariants {
			if ciliumVariants[i].routing == routing {
				v = &ciliumVariants[i]
			}
		}
		c := startCiliumCluster(t, bins, cdir, *v, image, gso)
		cp, nodes = c.kc.cp, c.nodes
		s.outside = c.kc.cpNS
		for _, a := range c.agents {
			s.agents = append(s.agents, a.cmd.Process.Pid)
			s.pinRoots = append(s.pinRoots, "/sys/fs/bpf") // the node's bpffs, the agent's --bpf-root
		}
		s.ready = c.ready
		s.info.Config = []string{"cilium-agent " + strings.Join(append(ciliumAgentArgs("ADMIN-KUBECONFIG"), v.args...), " "),
			"cilium-operator-generic: " + strings.Join(ciliumOperatorArgs("ADMIN-KUBECONFIG"), " ")}
		st, _ := c.dbg(c.nodes[0], "status", "--verbose")
		for _, key := range []string{"Cilium", "KubeProxyReplacement", "Routing", "Attach Mode", "Device Mode", "Masquerading",
			"IPv4 BIG TCP", "Socket LB", "Socket LB Coverage", "Mode", "Backend Selection"} {
			s.info.Config = append(s.info.Config, "status "+key+": "+statusField(st, key))
		}
	default:
		t.Fatalf("XLANE_PEERS_SETUPS: %q: the peer is xlane or cilium", name)
	}
	if gso > 0 {
		s.info.Config = append(s.info.Config, fmt.Sprintf("uplinks (ul0 and its bridge port): gso_max_size, gro_max_size, gso_ipv4_max_size, gro_ipv4_max_size %d", gso))
	}
	pods := startBenchPods(t, cp, image, podSpec{"client", "client", nodes[0]},
		podSpec{"local", "local", nodes[0]}, podSpec{"remote", "remote", nodes[1]})
	s.client, s.local, s.remote = pods[0], pods[1], pods[2]
	if peer == "xlane" {
		// The pods' network, made at the first CNI ADD: its mode and
		// BIG TCP (auto: what the calibration above measured).
		var n model.Network
		nodes[0].mustXlane(&n, "network", "inspect", "pods")
		s.info.Config = append(s.info.Config, fmt.Sprintf("network pods: mode %s (%s), BIG TCP %s: IPv4 %v, IPv6 %v (%s)",
			n.Mode, n.ModeReason, n.BigTCP, n.BigTCP4, n.BigTCP6, n.BigTCPReason))
	}
	for i, p := range []*benchPod{s.local, s.remote} {
		p.serve(t, name+" "+p.pod.Name+" iperf3", nil, "iperf3", "-s", "-B", p.ip.String(), "-p", strconv.Itoa(peersIperfPort))
		p.serve(t, name+" "+p.pod.Name+" sockperf", nil, "sockperf", "sr", "--tcp", "-i", p.ip.String(), "-p", strconv.Itoa(peersSockperfPort))
		p.serve(t, name+" "+p.pod.Name+" conn-server", []string{peersHelperEnv + "=conn-server"}, self,
			"-addr", p.ip.String(), "-port", strconv.Itoa(peersConnPort), "-n", "1", "-id", strconv.Itoa(i+1)) // local 1, remote 2
	}
	s.cp, s.nodes = cp, nodes
	s.vip = createBenchService(t, cp, "peers-cps", "remote", intstr.FromInt32(peersConnPort))
	s.nodePort = createNodePortService(t, cp, "peers-np", "remote", peersConnPort, nodes[0].addr4)
	// Every path answers before anything is measured.
	for _, p := range []*benchPod{s.local, s.remote} {
		if got, err := s.client.name(netip.AddrPortFrom(p.ip, 8080)); err != nil || got != p.kubeletNode.name {
			t.Fatalf("%s: client -> %s (%s): %q %v", name, p.pod.Name, p.ip, got, err)
		}
	}
	waitFor(t, time.Minute, name+": the ClusterIP "+s.vip.String()+" answering", func() bool {
		r, err := s.conn(self, time.Second)
		return err == nil && r.OK > 0 && r.Failed == 0
	})
	waitFor(t, time.Minute, name+": the NodePort "+s.nodePort.String()+" answering from outside", func() bool {
		r, err := s.connFrom(self, nil, []netip.AddrPort{s.nodePort}, time.Second)
		return err == nil && r.OK > 0
	})
	return s
}

// serve runs argv as a server process of pod p until the test ends.
func (p *benchPod) serve(t *testing.T, what string, env []string, argv ...string) {
	t.Helper()
	cmd := p.command(argv...)
	cmd.Env = append(os.Environ(), env...)
	var out logProc
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", what, tail(out.String(), 2000))
		}
	})
}

// conn runs the connection-rate client from the client pod against the
// ClusterIP for d.
func (s *peerSetup) conn(self string, d time.Duration) (connrate.Result, error) {
	return s.connFrom(self, s.client, []netip.AddrPort{s.vip}, d)
}

// connFrom runs the connection-rate client against targets for d, in pod
// p's namespace and cgroup, or (p nil) outside the cluster: in the
// namespace of its API server, on the underlay.
func (s *peerSetup) connFrom(self string, p *benchPod, targets []netip.AddrPort, d time.Duration, extra ...string) (connrate.Result, error) {
	var r connrate.Result
	f, err := os.CreateTemp("", "xle-peers-targets-")
	if err != nil {
		return r, err
	}
	defer os.Remove(f.Name())
	for _, t := range targets {
		fmt.Fprintln(f, t)
	}
	f.Close()
	argv := append([]string{self, "-targets", f.Name(), "-duration", d.String(), "-conc", "4"}, extra...)
	cmd := inNS(s.outside, argv...)
	if p != nil {
		cmd = p.command(argv...)
	}
	cmd.Env = append(os.Environ(), peersHelperEnv+"=conn-client")
	out, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("conn-client: %w", err)
	}
	return r, json.Unmarshal(out, &r)
}

// measure runs every row once (repetition r) on s.
func (s *peerSetup) measure(t *testing.T, rep *peers.Report, r int, d time.Duration, self string) {
	t.Helper()
	name := s.info.Name
	fail := func(row string, err error) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s, rep %d, %s: %v", name, r, row, err))
		t.Errorf("%s, rep %d, %s: %v", name, r, row, err)
	}
	for _, dst := range []struct {
		where string
		pod   *benchPod
	}{{"same node", s.local}, {"across nodes", s.remote}} {
		for _, streams := range []int{1, 8} {
			row := fmt.Sprintf("pod-pod %s, TCP %d stream", dst.where, streams)
			if streams > 1 {
				row += "s"
			}
			if !peersRowWanted(t, row) {
				continue
			}
			stop := peersPerf(t, name, row, r)
			c0, _ := peers.ReadCPU()
			out, err := s.client.command("iperf3", "-J", "-c", dst.pod.ip.String(), "-p", strconv.Itoa(peersIperfPort),
				"-P", strconv.Itoa(streams), "-t", strconv.Itoa(int(d.Seconds()))).Output()
			c1, _ := peers.ReadCPU()
			stop()
			g, perr := peers.Iperf3(out)
			if err != nil || perr != nil {
				fail(row, fmt.Errorf("iperf3: %v %v", err, perr))
				continue
			}
			rep.Add(name, row, r, g)
			rep.Add(name, row+", CPU", r, peers.CPUPerGbit(c0, c1, g, d.Seconds()))
			t.Logf("rep %d %-14s %-40s %7.2f Gbit/s", r, name, row, g)
		}
		row := "pod-pod " + dst.where + ", TCP_RR"
		if !peersRowWanted(t, row) {
			continue
		}
		stop := peersPerf(t, name, row, r)
		out, err := s.client.command("sockperf", "pp", "--tcp", "-i", dst.pod.ip.String(), "-p", strconv.Itoa(peersSockperfPort),
			"-t", strconv.Itoa(int(d.Seconds())), "-m", "64").CombinedOutput()
		stop()
		per, p50, perr := peers.SockperfRR(string(out))
		if err != nil || perr != nil {
			fail(row, fmt.Errorf("sockperf: %v %v\n%s", err, perr, tail(string(out), 1000)))
		} else {
			rep.Add(name, row, r, per)
			rep.Add(name, row+" p50", r, p50)
			t.Logf("rep %d %-14s %-40s %7.0f trans/s, p50 %.1f µs", r, name, row, per, p50)
		}
	}
	// 64-byte UDP across nodes, the sender unlimited (-b 0): what the
	// remote pod received a second (a forwarding rate; the client's CPU
	// bounds what is sent).
	udp := "pod-pod across nodes, 64-byte UDP"
	if peersRowWanted(t, udp) {
		stop := peersPerf(t, name, udp, r)
		out, err := s.client.command("iperf3", "-J", "-u", "-l", "64", "-b", "0", "-c", s.remote.ip.String(),
			"-p", strconv.Itoa(peersIperfPort), "-t", strconv.Itoa(int(d.Seconds()))).Output()
		stop()
		if sent, pps, perr := peers.IperfUDP(out); err != nil || perr != nil {
			fail(udp, fmt.Errorf("iperf3: %v %v", err, perr))
		} else {
			rep.Add(name, udp, r, pps)
			t.Logf("rep %d %-14s %-40s %7.0f packets/s received of %.0f sent", r, name, udp, pps, sent)
		}
	}
	s.cps(t, rep, r, "CPS to a ClusterIP, 1 Service", func() (connrate.Result, error) { return s.conn(self, d) })
	s.nodePortRow(t, rep, r, d, self)
}

// nodePortRow measures the connection rate to the NodePort from outside
// (repetition r).
func (s *peerSetup) nodePortRow(t *testing.T, rep *peers.Report, r int, d time.Duration, self string) {
	t.Helper()
	name := s.info.Name
	// From outside, the NodePort's connections are source-translated to
	// reach the other node's pod: failures there are a result (a port
	// range running out), recorded beside the rate, not an error.
	row := "CPS to a NodePort from outside"
	if !peersRowWanted(t, row) {
		return
	}
	stop := peersPerf(t, name, row, r)
	res, err := s.connFrom(self, nil, []netip.AddrPort{s.nodePort}, d)
	stop()
	if err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s, rep %d, %s: %v", name, r, row, err))
		t.Errorf("%s, rep %d, %s: %v", name, r, row, err)
		return
	}
	rep.Add(name, row, r, res.CPS)
	failed := 100 * float64(res.Failed) / float64(max(1, res.OK+res.Failed))
	rep.Add(name, row+", failed", r, failed)
	t.Logf("rep %d %-14s %-40s %7.0f conn/s, %.1f %% failed %v", r, name, row, res.CPS, failed, res.Errors)
}

// cps records the connection rate run measured as row, or the failure.
func (s *peerSetup) cps(t *testing.T, rep *peers.Report, r int, row string, run func() (connrate.Result, error)) {
	t.Helper()
	if !peersRowWanted(t, row) {
		return
	}
	stop := peersPerf(t, s.info.Name, row, r)
	res, err := run()
	stop()
	if err != nil || res.Failed > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s, rep %d, %s: %v: %d ok, %d failed %v", s.info.Name, r, row, err, res.OK, res.Failed, res.Errors))
		t.Errorf("%s, rep %d, %s: %v: %d ok, %d failed %v", s.info.Name, r, row, err, res.OK, res.Failed, res.Errors)
		return
	}
	rep.Add(s.info.Name, row, r, res.CPS)
	t.Logf("rep %d %-14s %-40s %7.0f conn/s", r, s.info.Name, row, res.CPS)
}

// rss is the mean resident set of the setup's agents (MiB).
func (s *peerSetup) rss(t *testing.T) float64 {
	var rss float64
	for _, pid := range s.agents {
		rss += float64(vmRSS(t, pid)) / float64(len(s.agents)) / (1 << 20)
	}
	return rss
}

// vmRSS is process pid's resident set (bytes).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("/proc/%d/status: no VmRSS", pid)
	return 0
}

func kernelRelease(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
