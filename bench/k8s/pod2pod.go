package main

// The second table: pod to pod across two nodes, on the same control
// plane, before the Services of the first are created (and torn down
// before them: their proxies would otherwise sync 10,000 Services too).
//
//	xlane          two nodes, each xlaned --kubernetes (peers and pod CIDRs
//	               from the Node objects, its BPF VXLAN overlay), pods as
//	               xlane endpoints (tc mode)
//	bridge-vxlan   two nodes, each with the reference CNI `bridge` plugin
//	               (Debian's containernetworking-plugins, host-local IPAM,
//	               MTU 1450), a kernel VXLAN device routed flannel-style
//	               (harness.FlannelVXLAN, bench/multinode's baseline) and
//	               kube-proxy in iptables mode
//
// Pod 1 on node A, pod 2 on node B; measured, interleaved per repetition:
// iperf3 with one stream pod 1 → pod 2 (Gbit/s), connections per second
// pod 1 → pod 2, and pod 1 → a ClusterIP whose one endpoint is pod 2.

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
	"github.com/xlane-dev/xlane/test/k8senv"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

var podSetups = []string{"xlane", "bridge-vxlan"}

const (
	p2pConnPort = 9000
	p2pSvcPort  = 9001 // the ClusterIP's target port (another listener)
)

// p2pResult is one measurement of one setup.
type p2pResult struct {
	Setup string  `json:"setup"`
	Test  string  `json:"test"` // iperf3-1, conn-pod, conn-clusterip
	Rep   int     `json:"rep"`
	Value float64 `json:"value"` // Gbit/s or conn/s
	Retr  int64   `json:"retransmits,omitempty"`
	// Failed connections of a conn test.
	Failed int `json:"failed,omitempty"`
}

// p2pCluster is one setup's two nodes.
type p2pCluster struct {
	setup  string
	nodes  [2]string // netns
	names  [2]string // Node objects
	pods   [2]string // netns
	podIP  [2]netip.Addr
	vip    string // ClusterIP:port to pod 2
	undo   harness.UndoStack
	kprocs []*harness.Proc
}

func podToPod(ctx context.Context, o options, self, tmp, bins, k8sBins, ul string, cp *k8senv.ControlPlane, runID string, rep *report) error {
	var cs []*p2pCluster
	defer func() {
		for i := len(cs) - 1; i >= 0; i-- {
			if err := cs[i].teardown(cp); err != nil {
				rep.Notes = append(rep.Notes, fmt.Sprintf("pod-to-pod %s teardown: %v", cs[i].setup, err))
			}
		}
	}()
	for i, s := range podSetups {
		c := &p2pCluster{setup: s}
		cs = append(cs, c)
		log.Printf("pod-to-pod: setup %s", s)
		if err := c.build(ctx, self, tmp, bins, k8sBins, ul, cp, fmt.Sprintf("%s-p%d", runID, i), i); err != nil {
			return fmt.Errorf("pod-to-pod %s: %w", s, err)
		}
	}
	for _, c := range cs {
		// Every path must work before it is measured.
		for _, t := range []string{fmt.Sprintf("%s:%d", c.podIP[1], p2pConnPort), c.vip} {
			r, err := c.conn(ctx, self, tmp, t, time.Second, 1)
			if err != nil {
				return fmt.Errorf("pod-to-pod %s: %w", c.setup, err)
			}
			if r.OK == 0 || r.Failed > 0 {
				return fmt.Errorf("pod-to-pod %s to %s: check run: %d ok, %d failed %v", c.setup, t, r.OK, r.Failed, r.Errors)
			}
		}
	}
	for r := 1; r <= o.Reps; r++ {
		for k := range cs {
			c := cs[(k+r-1)%len(cs)]
			out, err := harness.Run(ctx, harness.NSExec(c.pods[0], "iperf3", "-J", "-c", c.podIP[1].String(), "-P", "1",
				"-t", fmt.Sprint(int(o.Duration.Seconds())))...)
			if err != nil {
				return fmt.Errorf("pod-to-pod %s: iperf3: %w", c.setup, err)
			}
			ip, err := measure.ParseIperf3([]byte(out))
			if err != nil {
				return fmt.Errorf("pod-to-pod %s: iperf3: %w", c.setup, err)
			}
			rep.PodToPod = append(rep.PodToPod, p2pResult{Setup: c.setup, Test: "iperf3-1", Rep: r, Value: ip.ReceivedBps / 1e9, Retr: ip.Retransmits})
			log.Printf("pod-to-pod rep %d %-12s iperf3 1 stream %6.2f Gbit/s (%d retransmits)", r, c.setup, ip.ReceivedBps/1e9, ip.Retransmits)
			for _, t := range []struct{ test, target string }{
				{"conn-pod", fmt.Sprintf("%s:%d", c.podIP[1], p2pConnPort)}, {"conn-clusterip", c.vip}} {
				res, err := c.conn(ctx, self, tmp, t.target, o.Duration, o.conc)
				if err != nil {
					return fmt.Errorf("pod-to-pod %s %s: %w", c.setup, t.test, err)
				}
				rep.PodToPod = append(rep.PodToPod, p2pResult{Setup: c.setup, Test: t.test, Rep: r, Value: res.CPS, Failed: res.Failed})
				log.Printf("pod-to-pod rep %d %-12s %-14s %8.0f conn/s  failed %d %v", r, c.setup, t.test, res.CPS, res.Failed, res.Errors)
			}
		}
	}
	return nil
}

// conn runs the rate test from pod 1 to one target.
func (c *p2pCluster) conn(ctx context.Context, self, tmp, target string, d time.Duration, conc int) (connrate.Result, error) {
	var r connrate.Result
	f := filepath.Join(tmp, "p2p-"+strings.NewReplacer(":", "_", ".", "_").Replace(target))
	if err := writeLines(f, []string{target}); err != nil {
		return r, err
	}
	out, err := harness.Run(ctx, harness.NSExec(c.pods[0], self, "conn-client", "-targets", f, "-duration", d.String(), "-conc", fmt.Sprint(conc))...)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal([]byte(out), &r)
}

func (c *p2pCluster) build(ctx context.Context, self, tmp, bins, k8sBins, ul string, cp *k8senv.ControlPlane, id string, idx int) error {
	c.nodes = [2]string{id + "-a", id + "-b"}
	c.pods = [2]string{id + "-a-pod", id + "-b-pod"}
	if err := harness.AddNamespaces(ctx, &c.undo, c.nodes[0], c.nodes[1], c.pods[0], c.pods[1]); err != nil {
		return err
	}
	var underlay, subnet [2]string
	for i := range 2 {
		c.names[i] = fmt.Sprintf("%s-%c", c.setup, 'a'+i)
		underlay[i] = fmt.Sprintf("192.168.79.%d", 11+2*idx+i)
		subnet[i] = fmt.Sprintf("10.244.%d", 2+2*idx+i)
		port := fmt.Sprintf("p%d%c", idx, 'a'+i)
		if err := harness.RunAll(ctx,
			[]string{"ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", c.nodes[i]},
			[]string{"ip", "-n", ul, "link", "set", port, "master", "br0", "up"},
			[]string{"ip", "-n", c.nodes[i], "addr", "add", underlay[i] + "/24", "dev", "ul0"},
			[]string{"ip", "-n", c.nodes[i], "link", "set", "ul0", "up"}); err != nil {
			return err
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.names[i]},
			Spec: corev1.NodeSpec{PodCIDR: subnet[i] + ".0/24", PodCIDRs: []string{subnet[i] + ".0/24"}}}
		node, err := cp.CS.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", c.names[i], err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: underlay[i]}}
		if _, err := cp.CS.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", c.names[i], err)
		}
	}
	dir := filepath.Join(tmp, id)
	for i := range 2 {
		ndir := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(ndir, 0o700); err != nil {
			return err
		}
		var err error
		if c.setup == "xlane" {
			c.podIP[i], err = c.buildXlane(ctx, bins, ndir, cp, id, i)
		} else {
			c.podIP[i], err = c.buildBridge(ctx, k8sBins, ndir, cp, underlay, subnet, i)
		}
		if err != nil {
			return err
		}
	}
	// Pod 2 serves: iperf3, and the rate test's two ports.
	ip, err := harness.StartProc("iperf3 "+c.setup, filepath.Join(dir, "iperf3.log"), harness.NSExec(c.pods[1], "iperf3", "-s", "-B", c.podIP[1].String())...)
	if err != nil {
		return err
	}
	c.undo.Push("stop "+ip.Name, ip.Stop)
	srvLog := filepath.Join(dir, "server.log")
	srv, err := harness.StartProc("server "+c.setup, srvLog, harness.NSExec(c.pods[1], self, "conn-server", "-addr", c.podIP[1].String(),
		"-port", fmt.Sprint(p2pConnPort), "-n", "2", "-id", "2")...)
	if err != nil {
		return err
	}
	c.undo.Push("stop "+srv.Name, srv.Stop)
	if err := harness.WaitFor(ctx, srv.Name, 30*time.Second, srv, func() bool {
		b, _ := os.ReadFile(srvLog)
		return strings.Contains(string(b), "ready")
	}); err != nil {
		return err
	}
	svc := "p2p-" + c.setup
	if c.vip, err = createService(ctx, cp, svc, p2pSvcPort, c.podIP[1:]); err != nil {
		return err
	}
	c.undo.Push("delete Service "+svc, func(ctx context.Context) error {
		return cp.CS.CoreV1().Services(benchNS).Delete(ctx, svc, metav1.DeleteOptions{})
	})
	c.undo.Push("delete EndpointSlice "+svc, func(ctx context.Context) error {
		return cp.CS.DiscoveryV1().EndpointSlices(benchNS).Delete(ctx, svc+"-1", metav1.DeleteOptions{})
	})
	// Both nodes program it, and pod 2 answers through the overlay.
	f := filepath.Join(dir, "vip")
	if err := writeLines(f, []string{c.vip, fmt.Sprintf("%s:%d", c.podIP[1], p2pConnPort)}); err != nil {
		return err
	}
	_, err = harness.Run(ctx, harness.NSExec(c.pods[0], self, "probe-ready", "-targets", f, "-timeout", "60s")...)
	return err
}

func (c *p2pCluster) buildXlane(ctx context.Context, bins, dir string, cp *k8senv.ControlPlane, id string, i int) (netip.Addr, error) {
	p, err := harness.StartXlaned(ctx, &c.undo, harness.Xlaned{Name: "xlaned " + c.names[i], Netns: c.nodes[i], Bins: bins, Dir: dir,
		PinDir: filepath.Join("/sys/fs/bpf", fmt.Sprintf("%s-%d", id, i)), Timeout: 60 * time.Second,
		Args: []string{"--docker-plugin-socket=", "--uplink", "ul0", "--node-name", c.names[i], "--cluster-cidr", clusterCIDR,
			"--kubernetes", "--kubeconfig", cp.Kubeconfig}})
	if err != nil {
		return netip.Addr{}, err
	}
	if err := harness.WaitFor(ctx, "xlane network create pods", 60*time.Second, p, func() bool {
		_, err := harness.Xlane(ctx, bins, dir, "network", "create", "pods", "--mode", "tc")
		return err == nil
	}); err != nil {
		return netip.Addr{}, err
	}
	out, err := harness.Xlane(ctx, bins, dir, "-o", "json", "endpoint", "add", "pods", "--netns", c.pods[i], "--id", "pod")
	if err != nil {
		return netip.Addr{}, err
	}
	ep, err := harness.ParseEndpoint(out)
	return ep.IPv4, err
}

// buildBridge: the reference bridge plugin attaches the pod (run in the
// node's namespace, as a runtime would), flannel-style VXLAN routes to
// the other node's pod CIDR, kube-proxy in iptables mode.
func (c *p2pCluster) buildBridge(ctx context.Context, k8sBins, dir string, cp *k8senv.ControlPlane, underlay, subnet [2]string, i int) (netip.Addr, error) {
	node := c.nodes[i]
	if err := harness.RunAll(ctx, harness.NSExec(node, "sysctl", "-qw", "net.ipv4.ip_forward=1")); err != nil {
		return netip.Addr{}, err
	}
	mac := [2]string{"02:00:5e:11:00:01", "02:00:5e:11:00:02"}
	if err := harness.FlannelVXLAN(ctx, node, "flannel.1", "ul0", underlay[i], mac[i], subnet[i],
		harness.FlannelPeer{Underlay: underlay[1-i], MAC: mac[1-i], Subnet: subnet[1-i]}); err != nil {
		return netip.Addr{}, err
	}
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "cbr0", "type": "bridge", "bridge": "cni0", "isGateway": true,
 "ipMasq": false, "hairpinMode": true, "mtu": 1450,
 "ipam": {"type": "host-local", "ranges": [[{"subnet": "%s.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "%s"}}`,
		subnet[i], filepath.Join(dir, "ipam"))
	argv := harness.NSExec(node, "env", "CNI_COMMAND=ADD", "CNI_CONTAINERID=bench-"+c.names[i], "CNI_NETNS="+filepath.Join(harness.NetnsDir, c.pods[i]),
		"CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni", "/usr/lib/cni/bridge")
	out, err := harness.RunInput(ctx, conf, argv...)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bridge plugin ADD: %w", err)
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) == 0 {
		return netip.Addr{}, fmt.Errorf("bridge plugin ADD result %q: %v", out, err)
	}
	pfx, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bridge plugin ADD result: ips[0].address: %w", err)
	}
	kp, err := harness.StartProc("kube-proxy "+c.names[i], filepath.Join(dir, "kube-proxy.log"), harness.NSExec(node, filepath.Join(k8sBins, "kube-proxy"),
		"--kubeconfig="+cp.Admin, "--hostname-override="+c.names[i], "--proxy-mode=iptables",
		"--cluster-cidr="+clusterCIDR, "--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--v=0")...)
	if err != nil {
		return netip.Addr{}, err
	}
	c.undo.Push("stop "+kp.Name, kp.Stop)
	return pfx.Addr(), nil
}

// teardown stops the setup's processes, removes its namespaces and its
// Node objects.
func (c *p2pCluster) teardown(cp *k8senv.ControlPlane) error {
	err := c.undo.Run()
	for _, n := range c.names {
		if n == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if e := cp.CS.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); e != nil && err == nil {
			err = e
		}
		cancel()
	}
	return err
}
