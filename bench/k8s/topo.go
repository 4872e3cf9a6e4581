package main

// The cluster bench/k8s measures: one control plane (test/k8senv: etcd
// and a real kube-apiserver) and one node per mode, each a network
// namespace on a shared underlay bridge, each with a client pod and three
// backend pods:
//
//	                 cp: etcd + kube-apiserver 192.168.79.100:6443
//	                  |
//	  ul: br0 --------+-----------------+-----------------+
//	        |                           |                 |
//	  node xlane (.1)        node kp-iptables (.2)  node kp-nftables (.3)
//	  xlaned --kubernetes    kube-proxy             kube-proxy
//	                         --proxy-mode=iptables  --proxy-mode=nftables
//	  client b1 b2 b3        client b1 b2 b3        client b1 b2 b3
//
// The pods have the same addresses on every node (10.244.1.0/24, the
// xlane node's pod CIDR, from xlane's IPAM): one EndpointSlice per Service
// serves all three nodes, and every proxy sees the same Services. On the
// xlane node the pods are xlane endpoints (network in tc mode); on the
// kube-proxy nodes they are routed veths set up by hand (a /32 route per
// pod, the gateway 10.244.1.1 on the node's lo), as a routed CNI plugin
// (ptp, Calico) leaves them, with no bridge: kube-proxy's rules see every
// packet without br_netfilter. Only the xlane node's Node object has a pod
// CIDR (xlane would otherwise route the others' pod CIDRs to them); the
// kube-proxy nodes' Nodes carry their InternalIP, which kube-proxy waits for.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/test/k8senv"
)

const (
	cpAddr      = "192.168.79.100"
	podCIDR     = "10.244.1.0/24"
	clusterCIDR = "10.244.0.0/16"
	podGateway  = "10.244.1.1"
	// Service i's backends listen on backendPort+i; the probe Service's
	// on probePort.
	backendPort   = 20000
	probePort     = 8080
	portsPerProc  = 15000
	servicePort   = 80
	maxServices   = 40000
	serviceCIDR   = "10.96.0.0/16"
	probeSvc      = "probe"
	benchNS       = "default"
	backendsCount = 3
)

// modes, in the order of the tables.
var modes = []string{"xlane", "kube-proxy-iptables", "kube-proxy-nftables"}

// k8sNode is one node of one mode.
type k8sNode struct {
	mode, name   string // mode; its Node object's name
	short        string // in namespace names
	addr         string // underlay address
	netns        string // the node
	client       string // client pod netns
	backends     []string
	clientIP     netip.Addr
	backendIPs   []netip.Addr
	dir          string
	bins         string // xlane's binaries
	k8sBins      string
	cp           *k8senv.ControlPlane
	pin          string
	proxy        *harness.Proc // xlaned or kube-proxy
	undo         *harness.UndoStack
	proxyStarted time.Time
	proxyReady   time.Time // xlaned: when its API answered
}

func newNode(mode, runID, tmp, bins, k8sBins string, i int, cp *k8senv.ControlPlane, undo *harness.UndoStack) *k8sNode {
	short := map[string]string{"xlane": "xl", "kube-proxy-iptables": "ipt", "kube-proxy-nftables": "nft"}[mode]
	n := &k8sNode{mode: mode, name: map[string]string{"xlane": "xlane", "kube-proxy-iptables": "kp-iptables", "kube-proxy-nftables": "kp-nftables"}[mode],
		short: short, addr: fmt.Sprintf("192.168.79.%d", i+1), netns: runID + "-" + short, client: runID + "-" + short + "-cl",
		dir: filepath.Join(tmp, short), bins: bins, k8sBins: k8sBins, cp: cp, pin: filepath.Join("/sys/fs/bpf", runID+"-"+short), undo: undo}
	for b := 1; b <= backendsCount; b++ {
		n.backends = append(n.backends, fmt.Sprintf("%s-%s-b%d", runID, short, b))
	}
	return n
}

func (n *k8sNode) xlane(ctx context.Context, args ...string) (string, error) {
	return harness.Xlane(ctx, n.bins, n.dir, args...)
}

// createNode creates n's Node object: its InternalIP, and for xlane the pod
// CIDR.
func (n *k8sNode) createNode(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
	if n.mode == "xlane" {
		node.Spec = corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}
	}
	node, err := n.cp.CS.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.name, err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.addr}, {Type: corev1.NodeHostName, Address: n.name}}
	if _, err := n.cp.CS.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", n.name, err)
	}
	return nil
}

// setup makes the node's namespaces and its link to the underlay ul; the
// pods (xlane: endpoints; kube-proxy: routed veths with the addresses in
// ips, the xlane node's) and the proxy.
func (n *k8sNode) setup(ctx context.Context, ul string, ips []netip.Addr) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	if err := harness.AddNamespaces(ctx, n.undo, append([]string{n.netns, n.client}, n.backends...)...); err != nil {
		return err
	}
	port := "p" + n.short
	if err := harness.RunAll(ctx,
		[]string{"ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "ul0", "netns", n.netns},
		[]string{"ip", "-n", ul, "link", "set", port, "master", "br0", "up"},
		[]string{"ip", "-n", n.netns, "addr", "add", n.addr + "/24", "dev", "ul0"},
		[]string{"ip", "-n", n.netns, "link", "set", "ul0", "up"}); err != nil {
		return err
	}
	if n.mode == "xlane" {
		// No xlaned --uninstall at the end: with 10,000 services it
		// takes longer than a teardown step may, and removing the
		// namespaces and the pin dir removes all the same.
		return n.setupXlane(ctx)
	}
	return n.setupKubeProxy(ctx, ips)
}

func (n *k8sNode) xlanedArgs(kube bool) []string {
	args := []string{"--docker-plugin-socket=", "--uplink", "ul0", "--node-name", n.name, "--cluster-cidr", clusterCIDR}
	if kube {
		args = append(args, "--kubernetes", "--kubeconfig", n.cp.Kubeconfig)
	}
	return args
}

// startXlaned starts xlaned (in Kubernetes mode with kube); it is stopped
// by the run's teardown or stopProxy.
func (n *k8sNode) startXlaned(ctx context.Context, kube bool) error {
	n.proxyStarted = time.Now()
	p, err := harness.StartXlaned(ctx, n.undo, harness.Xlaned{Name: "xlaned " + n.name, Netns: n.netns, Bins: n.bins, Dir: n.dir,
		PinDir: n.pin, Args: n.xlanedArgs(kube), Timeout: 60 * time.Second, Adopt: n.proxy != nil})
	n.proxy, n.proxyReady = p, time.Now()
	return err
}

func (n *k8sNode) setupXlane(ctx context.Context) error {
	if err := n.startXlaned(ctx, true); err != nil {
		return err
	}
	// The network takes this node's pod CIDR, once its Node is synced.
	err := harness.WaitFor(ctx, "xlane network create pods", 60*time.Second, n.proxy, func() bool {
		_, err := n.xlane(ctx, "network", "create", "pods", "--mode", "tc")
		return err == nil
	})
	if err != nil {
		return err
	}
	add := func(netns, id string) (netip.Addr, error) {
		out, err := n.xlane(ctx, "-o", "json", "endpoint", "add", "pods", "--netns", netns, "--id", id)
		if err != nil {
			return netip.Addr{}, err
		}
		ep, err := harness.ParseEndpoint(out)
		return ep.IPv4, err
	}
	var err2 error
	if n.clientIP, err2 = add(n.client, "client"); err2 != nil {
		return err2
	}
	for i, b := range n.backends {
		ip, err := add(b, fmt.Sprintf("b%d", i+1))
		if err != nil {
			return err
		}
		n.backendIPs = append(n.backendIPs, ip)
	}
	return nil
}

// setupKubeProxy plumbs the pods by hand with the addresses ips (client,
// then backends) and starts kube-proxy.
func (n *k8sNode) setupKubeProxy(ctx context.Context, ips []netip.Addr) error {
	pods := append([]string{n.client}, n.backends...)
	if len(ips) != len(pods) {
		return fmt.Errorf("%s: %d pod addresses for %d pods", n.mode, len(ips), len(pods))
	}
	cmds := [][]string{
		harness.NSExec(n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"),
		{"ip", "-n", n.netns, "addr", "add", podGateway + "/32", "dev", "lo"},
	}
	for i, p := range pods {
		host := fmt.Sprintf("h%d", i)
		cmds = append(cmds,
			[]string{"ip", "-n", n.netns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p},
			[]string{"ip", "-n", n.netns, "link", "set", host, "up"},
			[]string{"ip", "-n", n.netns, "route", "add", ips[i].String() + "/32", "dev", host},
			[]string{"ip", "-n", p, "addr", "add", ips[i].String() + "/32", "dev", "eth0"},
			[]string{"ip", "-n", p, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", p, "route", "add", podGateway, "dev", "eth0", "scope", "link"},
			[]string{"ip", "-n", p, "route", "add", "default", "via", podGateway, "dev", "eth0"})
	}
	if err := harness.RunAll(ctx, cmds...); err != nil {
		return err
	}
	n.clientIP, n.backendIPs = ips[0], ips[1:]
	return n.startKubeProxy(ctx)
}

func (n *k8sNode) proxyMode() string { return strings.TrimPrefix(n.mode, "kube-proxy-") }

// startKubeProxy starts kube-proxy in the node's namespace: the mode's
// proxier, its defaults otherwise (minSyncPeriod 1 s), except that it
// leaves the conntrack sysctls alone (not its namespace's to size).
func (n *k8sNode) startKubeProxy(ctx context.Context) error {
	logPath := filepath.Join(n.dir, "kube-proxy.log")
	n.proxyStarted = time.Now()
	p, err := harness.StartProc("kube-proxy "+n.proxyMode(), logPath, harness.NSExec(n.netns, filepath.Join(n.k8sBins, "kube-proxy"),
		"--kubeconfig="+n.cp.Admin, "--hostname-override="+n.name, "--proxy-mode="+n.proxyMode(),
		"--cluster-cidr="+clusterCIDR, "--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--v=0")...)
	if err != nil {
		return err
	}
	n.proxy = p
	n.undo.Push("stop "+p.Name, p.Stop)
	return nil
}

// stopProxy stops xlaned or kube-proxy and removes what it programmed:
// kube-proxy --cleanup; for xlane, every Kubernetes service and its
// connection tracking, through an xlaned started without --kubernetes (a
// pruning apply of nothing, ct flush), then stopped. What the proxy programmed is gone afterwards.
func (n *k8sNode) stopProxy(ctx context.Context) error {
	if err := n.proxy.Stop(ctx); err != nil {
		return err
	}
	if n.mode != "xlane" {
		_, err := harness.Run(ctx, harness.NSExec(n.netns, filepath.Join(n.k8sBins, "kube-proxy"), "--cleanup", "--proxy-mode="+n.proxyMode())...)
		return err
	}
	if err := n.startXlaned(ctx, false); err != nil {
		return err
	}
	if _, err := harness.RunInput(ctx, `{"services": []}`, filepath.Join(n.bins, "xlane"), "--socket", filepath.Join(n.dir, "xlane.sock"),
		"service", "apply", "-f", "-", "--prune"); err != nil {
		return err
	}
	// And its connection tracking: a closed flow's entry keeps its
	// translation (a SYN reusing the tuple reopens it, bpf/lib/ct.h), and
	// without xlaned running nothing collects it, so a probe reusing a
	// port of the last rate test could still reach a pruned Service.
	if _, err := n.xlane(ctx, "ct", "flush"); err != nil {
		return err
	}
	return n.proxy.Stop(ctx)
}

// startProxy starts xlaned --kubernetes or kube-proxy again.
func (n *k8sNode) startProxy(ctx context.Context) error {
	if n.mode == "xlane" {
		return n.startXlaned(ctx, true)
	}
	return n.startKubeProxy(ctx)
}

// startServers starts the backends' servers: ports backendPort to
// backendPort+svcs-1 and probePort, each answering with the backend's
// number.
func (n *k8sNode) startServers(ctx context.Context, self string, svcs int) error {
	for i, b := range n.backends {
		srvs := []struct{ port, count int }{{probePort, 1}}
		for p := 0; p < svcs; p += portsPerProc {
			srvs = append(srvs, struct{ port, count int }{backendPort + p, min(portsPerProc, svcs-p)})
		}
		for _, srv := range srvs {
			name := fmt.Sprintf("server %s b%d :%d+%d", n.short, i+1, srv.port, srv.count)
			logPath := filepath.Join(n.dir, fmt.Sprintf("server-b%d-%d.log", i+1, srv.port))
			p, err := harness.StartProc(name, logPath, harness.NSExec(b, self, "conn-server", "-addr", n.backendIPs[i].String(),
				"-port", fmt.Sprint(srv.port), "-n", fmt.Sprint(srv.count), "-id", fmt.Sprint(i+1))...)
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
	return nil
}
