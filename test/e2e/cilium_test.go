package e2e

// Cilium on the cluster tests' real two-node cluster (issue 31): the
// reference eBPF datapath, built here by scripts/cilium-bins.sh, as the
// CNI and kube-proxy replacement of kubelet nodes made as
// TestKubernetesCluster's are, for bench/peers (peers_test.go) to measure
// xlane against it in the same run.
//
// Two (or more) agents on one kernel. Cilium's own CI runs its agents on
// kind: each node a container with its own network, mount and cgroup
// namespaces, the agent a pod there with the node's /sys/fs/bpf,
// /run/cilium and /var/lib/cilium as hostPaths and cgroup2 mounted at
// /run/cilium/cgroupv2 of the node (Documentation/installation/kind.rst:
// the socket load balancer needs each node in a cgroup namespace of its
// own, so that the agent attaches its connect/sendmsg programs at the
// node's cgroup, not the machine's). The nodes here are the same,
// namespace for namespace:
//
//   - network: the node's namespace (startKubeletNode), so the agent's
//     devices (cilium_host, cilium_net, cilium_vxlan, lxc*), its routes,
//     iptables rules, sysctls and the VXLAN port are the node's alone;
//   - mount: the node's mount namespace (daemonSet nodes), where
//     /sys/fs/bpf is a bpffs of the node's own (a new instance: the
//     agent's pinned maps and programs are the node's), and /run/cilium,
//     /var/lib/cilium (the BPF sources the agent compiles), /opt/cni/bin
//     and /etc/cni/net.d are directories of the node's bound over the
//     machine's (ciliumHostDirs, nodeHostDirs);
//   - cgroup: instead of a cgroup namespace, the node's cgroup2 subtree
//     (the kubelet's --cgroup-root, under which runc puts every pod of
//     the node, in the cgroup2 hierarchy too) is bound at the node's
//     /run/cilium/cgroupv2, the agent's --cgroup-root: the agent sees a
//     cgroup2 mount there (no auto-mount), and its socket-LB programs
//     attach to that subtree, so they translate Services for that node's
//     pods and nobody else's (the other node's agent, the machine's
//     processes and xlane's are outside it). As in kind, a process must
//     be inside the subtree for the socket LB to see it: clients of
//     ClusterIPs run in their pod's cgroup (benchPod.command).
//
// The agent runs in the node's network and mount namespaces by nsenter,
// with the cache's clang (clang-19) first on its PATH; its kubeconfig is
// the API server's address (no kube-proxy: nothing translates the
// kubernetes Service before the agent runs, as in Cilium's kube-proxy-free
// guide, k8sServiceHost). The operator (cilium-operator-generic) runs in
// the control plane's namespace and registers the CRDs compiled into it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ciliumHostDirs are the agent's directories each node has its own of.
var ciliumHostDirs = []string{"/run/cilium", "/var/lib/cilium"}

// ciliumDir is the cache directory of scripts/cilium-bins.sh (bin/,
// bpf/): the environment's XLANE_CILIUM_DIR (which make sets), checked,
// or what the script prints (it builds Cilium where it is not cached:
// many minutes, once per machine).
func ciliumDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("XLANE_CILIUM_DIR"); d != "" {
		for _, f := range []string{"bin/cilium-agent", "bin/cilium-operator-generic", "bin/cilium-cni", "bin/cilium-dbg", "bin/clang", "bpf/bpf_lxc.c"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Fatalf("XLANE_CILIUM_DIR=%s: %v", d, err)
			}
		}
		return d
	}
	cmd := exec.Command("../../scripts/cilium-bins.sh")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/cilium-bins.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// ciliumVariant is one configuration of Cilium's the benchmark runs.
type ciliumVariant struct {
	name    string
	routing string   // xlaned's --routing of the same variant
	args    []string // the agent's flags beyond ciliumAgentArgs
}

// ciliumVariants follow Cilium's tuning guide (Documentation/operations/
// performance/tuning.rst, "Recommendation") for this kernel: kube-proxy
// replacement with the socket LB, BPF host routing
// (--enable-host-legacy-routing=false), BPF masquerading, distributed
// LRU, map size ratio 0.08, the BPF clock probe, no Hubble, no bandwidth
// manager (issue 31); BIG TCP where the guide allows it (native routing:
// it needs tunnelling off); not its netkit device mode (no CONFIG_NETKIT
// in this kernel). Native
// routing (auto-direct-node-routes: the nodes share an L2) and VXLAN
// are separate variants, as xlane's --routing.
var ciliumVariants = []ciliumVariant{
	{name: "cilium-native", routing: "native", args: []string{"--routing-mode=native",
		"--ipv4-native-routing-cidr=10.244.0.0/16", "--auto-direct-node-routes=true", "--enable-ipv4-big-tcp=true"}},
	{name: "cilium-vxlan", routing: "vxlan", args: []string{"--routing-mode=tunnel", "--tunnel-protocol=vxlan"}},
}

// ciliumAgentArgs are the flags of every variant's agent.
func ciliumAgentArgs(kubeconfig string) []string {
	return []string{
		"--k8s-kubeconfig-path=" + kubeconfig,
		"--cluster-name=default", "--cluster-id=0",
		"--ipam=kubernetes", "--k8s-require-ipv4-pod-cidr=true",
		"--enable-ipv4=true", "--enable-ipv6=false",
		"--kube-proxy-replacement=true",
		"--enable-host-legacy-routing=false",
		// The guide's recommended profile beyond that: per-CPU LRU
		// backend memory, the larger map size ratio, the jiffies clock
		// for the CT map (its netkit device mode needs CONFIG_NETKIT,
		// which this kernel does not have: veth, as xlane's).
		"--bpf-distributed-lru", "--bpf-map-dynamic-size-ratio=0.08", "--enable-bpf-clock-probe",
		"--enable-bpf-masquerade=true", "--enable-ipv4-masquerade=true",
		"--enable-bandwidth-manager=false",
		"--enable-hubble=false",
		"--enable-l7-proxy=false",
		"--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--identity-allocation-mode=crd",
		"--devices=ul0", "--direct-routing-device=ul0",
		"--bpf-root=/sys/fs/bpf", "--cgroup-root=/run/cilium/cgroupv2",
		"--lib-dir=/var/lib/cilium", "--state-dir=/run/cilium",
		"--write-cni-conf-when-ready=/etc/cni/net.d/05-cilium.conflist",
		"--cni-exclusive=false",
		"--prometheus-serve-addr=",
	}
}

// ciliumOperatorArgs are the operator's flags.
func ciliumOperatorArgs(kubeconfig string) []string {
	return []string{"--k8s-kubeconfig-path=" + kubeconfig, "--cluster-name=default", "--cluster-id=0",
		"--ipam=kubernetes", "--identity-allocation-mode=crd", "--enable-metrics=false", "--operator-api-serve-addr=127.0.0.1:9234"}
}

// ciliumCluster is a two-node cluster with Cilium as its network.
type ciliumCluster struct {
	variant  ciliumVariant
	kc       *kubeCluster
	nodes    []*kubeletNode
	agents   []*logProc
	operator *logProc
	cdir     string
	// ready is each agent's time from its start to `cilium-dbg status`
	// OK.
	ready []time.Duration
}

// startCiliumCluster starts a control plane, the operator, and two
// nodes each with containerd, a kubelet and a cilium-agent of variant v,
// and waits until both agents are ready and both Nodes Ready; uplinkGSO:
// the nodes' ul0 set up for BIG TCP (kubeletOpts.uplinkGSO; 0: not).
func startCiliumCluster(t *testing.T, k8sBins, cdir string, v ciliumVariant, image string, uplinkGSO int) *ciliumCluster {
	t.Helper()
	c := &ciliumCluster{variant: v, cdir: cdir, kc: startKubeCluster(t, k8sBins, clusterCIDR, false)}
	cp := c.kc.cp
	c.operator = startProc(t, "cilium-operator", c.kc.cpNS, append([]string{filepath.Join(cdir, "bin", "cilium-operator-generic")},
		ciliumOperatorArgs(cp.admin)...)...)
	cg := cgroup2Root(t)
	var started []time.Time
	for i := 1; i <= 2; i++ {
		k := startKubeletNode(t, k8sBins, cp, c.kc.ul, i, image, kubeletOpts{daemonSet: true, hostDirs: ciliumHostDirs, podCgroups: true, uplinkGSO: uplinkGSO})
		c.nodes = append(c.nodes, k)
		// What Cilium's DaemonSet installs on the node: the CNI plugin
		// (its init container) and the BPF sources (its image's
		// /var/lib/cilium/bpf); the agent writes the CNI configuration
		// once it is ready.
		run(t, "cp", filepath.Join(cdir, "bin", "cilium-cni"), filepath.Join(k.root, "opt/cni/bin/cilium-cni"))
		run(t, "cp", "-r", filepath.Join(cdir, "bpf"), filepath.Join(k.root, "var/lib/cilium/bpf"))
		// The node's cgroup2 subtree as the agent's cgroup root.
		sub := filepath.Join(cg, k.cri.cgroup)
		run(t, "mkdir", "-p", filepath.Join(k.root, "run/cilium/cgroupv2"))
		run(t, "nsenter", "--mount="+k.mntns, "--", "mount", "--bind", sub, "/run/cilium/cgroupv2")
		// The pods' namespaces, where the agent enters them (the
		// DaemonSet's hostPath /var/run/netns at /var/run/cilium/netns).
		run(t, "mkdir", "-p", filepath.Join(k.root, "run/cilium/netns"))
		run(t, "nsenter", "--mount="+k.mntns, "--", "mount", "--bind", "/run/netns", "/run/cilium/netns")
		// Before the cgroup is removed (cleanups run last first): a
		// cgroup bound elsewhere cannot be.
		t.Cleanup(func() {
			exec.Command("nsenter", "--mount="+k.mntns, "--", "umount", "-l", "/run/cilium/cgroupv2", "/run/cilium/netns").Run()
		})
		args := append([]string{"nsenter", "--mount=" + k.mntns, "--", "env", "PATH=" + filepath.Join(cdir, "bin") + ":" + os.Getenv("PATH"),
			// The Node's name (as the DaemonSet's downward API gives
			// it): the machine's hostname is no node's.
			"K8S_NODE_NAME=" + k.name, "CILIUM_K8S_NAMESPACE=kube-system",
			filepath.Join(cdir, "bin", "cilium-agent")}, ciliumAgentArgs(cp.admin)...)
		args = append(args, v.args...)
		started = append(started, time.Now())
		c.agents = append(c.agents, startProc(t, "cilium-agent "+k.name, k.netns, args...))
	}
	c.ready = make([]time.Duration, len(c.nodes))
	for i, k := range c.nodes {
		waitFor(t, 5*time.Minute, "cilium-agent on "+k.name+" ready", func() bool {
			if c.agents[i].cmd.ProcessState != nil {
				t.Fatalf("cilium-agent on %s exited: %s", k.name, tail(c.agents[i].String(), 8000))
			}
			if c.operator.cmd.ProcessState != nil {
				t.Fatalf("cilium-operator exited: %s", tail(c.operator.String(), 8000))
			}
			out, err := c.dbg(k, "status", "--brief")
			return err == nil && strings.TrimSpace(out) == "OK"
		})
		c.ready[i] = time.Since(started[i])
		t.Logf("%s: cilium-agent on %s ready %v after its start", v.name, k.name, c.ready[i].Round(time.Millisecond))
	}
	for _, k := range c.nodes {
		waitFor(t, 2*time.Minute, "node "+k.name+" Ready", func() bool {
			n, err := cp.cs.CoreV1().Nodes().Get(context.Background(), k.name, metav1.GetOptions{})
			return err == nil && nodeReady(n)
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, k := range c.nodes {
				st, _ := c.dbg(k, "status", "--verbose")
				t.Logf("%s: cilium-dbg status --verbose:\n%s", k.name, st)
			}
		}
	})
	return c
}

// dbg runs cilium-dbg on node k (its agent's socket is in the node's
// mount namespace).
func (c *ciliumCluster) dbg(k *kubeletNode, args ...string) (string, error) {
	cmd := inNS(k.netns, append([]string{"nsenter", "--mount=" + k.mntns, "--", filepath.Join(c.cdir, "bin", "cilium-dbg")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// statusField is the value of "KEY:" in cilium-dbg status output.
func statusField(st, key string) string {
	for _, l := range strings.Split(st, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// cgroup2Root is where the machine mounts its cgroup2 hierarchy (the
// unified one of a hybrid set-up, or the only one), from the mount table.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	t.Fatal("no cgroup2 mount in /proc/self/mounts: Cilium's socket LB needs cgroup2")
	return ""
}

// benchPod is a pod of the Cilium and peers tests: its sandbox's
// namespace and its cgroup2 directory, where processes run as the pod's.
type benchPod struct {
	*kubeletNode
	pod    *corev1.Pod
	ip     netip.Addr
	netns  string // linked under /var/run/netns
	cgroup string // the pod's cgroup2 directory
}

// podSpec is a pod startBenchPods makes: its name, node and label app.
type podSpec struct {
	name, app string
	node      *kubeletNode
}

// startBenchPods creates a podserver pod per spec (bound to its node,
// labels app and node) and waits until each is Running and Ready with
// an IPv4 address.
func startBenchPods(t *testing.T, cp *controlPlane, image string, specs ...podSpec) []*benchPod {
	t.Helper()
	ctx := context.Background()
	var pods []*benchPod
	for _, s := range specs {
		k := s.node
		p, err := cp.cs.CoreV1().Pods("default").Create(ctx, podserverPod(s.name, s.app, k.name, image), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s: %v", s.name, err)
		}
		pods = append(pods, &benchPod{kubeletNode: k, pod: p})
	}
	for _, p := range pods {
		var got *corev1.Pod
		waitFor(t, 3*time.Minute, "pod "+p.pod.Name+" Running and Ready", func() bool {
			var err error
			got, err = cp.cs.CoreV1().Pods("default").Get(ctx, p.pod.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodRunning && podReady(got) && got.Status.PodIP != ""
		})
		p.pod = got
		for _, a := range got.Status.PodIPs {
			if ip := netip.MustParseAddr(a.IP); ip.Is4() {
				p.ip = ip
			}
		}
		if !p.ip.IsValid() {
			t.Fatalf("pod %s: no IPv4 address in %v", p.pod.Name, got.Status.PodIPs)
		}
		sbx := p.podNetns(t, got)
		p.netns = sbx.netns
		p.cgroup = podCgroup(t, p.kubeletNode, sbx.id)
	}
	return pods
}

// podCgroup is the cgroup2 directory of pod sandbox id's process (its
// pause process) on node k.
func podCgroup(t *testing.T, k *kubeletNode, id string) string {
	t.Helper()
	var st struct{ Info struct{ Pid int } }
	out := k.cri.mustCrictl("inspectp", "-o", "json", id)
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Info.Pid <= 0 {
		t.Fatalf("inspectp %s: no pid (%v) in %s", id, err, out)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", st.Info.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "0::"); ok {
			if rest == "/" {
				t.Fatalf("sandbox %s: its process is in the cgroup2 root (%q): runc did not join the cgroup2 hierarchy", id, b)
			}
			return filepath.Join(cgroup2Root(t), rest)
		}
	}
	t.Fatalf("sandbox %s: no cgroup2 line in %q", id, b)
	return ""
}

// command runs argv as a process of the pod: in its network namespace
// and its cgroup (where the node's socket LB, Cilium's, sees it).
func (p *benchPod) command(argv ...string) *exec.Cmd {
	return exec.Command("sh", append([]string{"-c", `echo $$ > "$1/cgroup.procs" && ns=$2 && shift 2 && exec nsenter --net="$ns" -- "$@"`,
		"sh", p.cgroup, nsPath(p.netns)}, argv...)...)
}

// name connects from p to dst (a podserver's 8080, directly or through a
// Service) and returns the name the server answered (its node's).
func (p *benchPod) name(dst netip.AddrPort) (string, error) {
	out, err := p.command("timeout", "5", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && head -n1 <&3", dst.Addr(), dst.Port())).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// createBenchService creates a ClusterIP Service name over the pods
// with label app=app, port 80 to their port target.
func createBenchService(t *testing.T, cp *controlPlane, name, app string, target intstr.IntOrString) netip.AddrPort {
	t.Helper()
	svc, err := cp.cs.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: target}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
}

// TestCiliumCluster runs Cilium (each variant) as the CNI and kube-proxy
// replacement of the two-node cluster: both agents ready with the
// configuration asked for (kube-proxy replacement, BPF host routing and
// masquerading, the routing mode), pods on both nodes get addresses
// from their Node's pod CIDR through cilium-cni, reach each other on one
// node and across nodes, and a ClusterIP from a pod reaches the pods of
// both nodes. `make test-cilium`; bench/peers runs on the same set-up.
func TestCiliumCluster(t *testing.T) {
	bins := k8sBins(t, "kube-apiserver", "xlane-etcd", "kubelet", "kube-controller-manager")
	cdir := ciliumDir(t)
	for _, v := range ciliumVariants {
		t.Run(v.name, func(t *testing.T) {
			image := "docker.io/xlane-e2e/podserver:" + suffix()
			c := startCiliumCluster(t, bins, cdir, v, image, 0)
			for _, k := range c.nodes {
				st, err := c.dbg(k, "status", "--verbose")
				if err != nil {
					t.Fatalf("%s: cilium-dbg status: %v\n%s", k.name, err, st)
				}
				for key, want := range map[string]string{"KubeProxyReplacement": "True", "Routing": "Host: BPF",
					"Masquerading": "BPF", "Socket LB": "Enabled", "Socket LB Coverage": "Full"} {
					if got := statusField(st, key); !strings.Contains(got, want) {
						t.Errorf("%s: cilium-dbg status --verbose: %s: %q, want %q", k.name, key, got, want)
					}
				}
			}
			pods := startBenchPods(t, c.kc.cp, image, podSpec{"client", "client", c.nodes[0]},
				podSpec{"web-n1", "web", c.nodes[0]}, podSpec{"web-n2", "web", c.nodes[1]})
			client := pods[0]
			for _, p := range pods {
				n, err := c.kc.cp.cs.CoreV1().Nodes().Get(context.Background(), p.kubeletNode.name, metav1.GetOptions{})
				if err != nil || !netip.MustParsePrefix(n.Spec.PodCIDRs[0]).Contains(p.ip) {
					t.Errorf("pod %s: %s outside its node's pod CIDRs (%v)", p.pod.Name, p.ip, err)
				}
			}
			for _, dst := range pods[1:] {
				got, err := client.name(netip.AddrPortFrom(dst.ip, 8080))
				if err != nil || got != dst.kubeletNode.name {
					t.Errorf("client -> %s (%s): %q %v, want %s", dst.pod.Name, dst.ip, got, err, dst.kubeletNode.name)
				}
			}
			vip := createBenchService(t, c.kc.cp, "web", "web", intstr.FromString("http"))
			seen := map[string]int{}
			deadline := time.Now().Add(time.Minute)
			for seen["n1"] == 0 || seen["n2"] == 0 {
				got, err := client.name(vip)
				if err != nil {
					got = err.Error() + ": " + got
				}
				seen[got]++
				if time.Now().After(deadline) {
					svc, _ := c.dbg(c.nodes[0], "service", "list")
					t.Fatalf("ClusterIP %s from the client pod (cgroup %s) for 1 min: %v, want the pods of both nodes; n1's services:\n%s",
						vip, client.cgroup, seen, svc)
				}
			}
			t.Logf("%s: ClusterIP %s from the client pod reached %v", v.name, vip, seen)
		})
	}
}
