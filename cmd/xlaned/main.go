// Command xlaned is the xlane daemon: it owns the state store, the BPF
// objects and the netlink work of one node, and serves the API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bgp"
	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/docker"
	"github.com/xlane-dev/xlane/internal/k8s"
	"github.com/xlane-dev/xlane/internal/lbipam"
	"github.com/xlane-dev/xlane/internal/metrics"
	"github.com/xlane-dev/xlane/internal/observe"
	"github.com/xlane-dev/xlane/internal/server"
	"github.com/xlane-dev/xlane/internal/services"
	"github.com/xlane-dev/xlane/internal/version"
	"github.com/xlane-dev/xlane/internal/vm"
	"github.com/xlane-dev/xlane/internal/xlaned"
)

func main() {
	// The acceleration self-test re-executes this binary as its child.
	accel.MaybeChild()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "xlaned:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("xlaned", flag.ContinueOnError)
	state := fs.String("state", "/var/lib/xlane/state.db", "state file (bbolt); one daemon per file")
	socket := fs.String("socket", api.DefaultSocket, "API unix socket (root only)")
	pinDir := fs.String("pin-dir", "/sys/fs/bpf/xlane", "bpffs directory for this instance's maps and links")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	uplink := fs.String("uplink", "", "the node's uplink device; XDP-mode networks get an XDP fast path on it (\"\" leaves it alone)")
	takeover := fs.Bool("uplink-takeover", false, "replace an XDP program on the uplink that xlane did not attach")
	xdpMode := fs.String("uplink-xdp-mode", datapath.XDPModeAuto, "XDP attach mode of the uplink program: native, generic, offload (refused: no driver offloads xlane's program), none (the uplink's tc program only: no uplink firewall scope or DDoS stage), or auto (native; on a veth and where the driver has no native XDP, generic once the firewall's uplink stage or an xdp-mode network needs it, none before: native XDP on a veth takes GSO/TSO from its peer, generic copies every GSO packet received)")
	ctSize := fs.Uint("ct-size", 1<<20, "conntrack table size (entries; two per flow); changing it needs the pinned table removed")
	natPorts := fs.String("nat-ports", daemon.DefaultNATPorts, "masquerade source-port range MIN-MAX; must not overlap net.ipv4.ip_local_port_range")
	noBackend := fs.String("service-no-backend", services.NoBackendReject, "what a new flow to a service VIP without backends gets: reject (a TCP RST, an ICMP port unreachable for UDP and the rest, as kube-proxy answers) or drop; counted as drop_no_backend either way")
	gcEvery := fs.Duration("ct-gc-interval", 10*time.Second, "how often expired conntrack entries are collected")
	accelCase := fs.Duration("accel-case-timeout", 5*time.Second, "time each case of the socket acceleration self-test may take before it counts as stalled (docs/accel.md); raise it on slow machines")
	monRate := fs.Uint("monitor-rate", observe.DefaultMonitorRate, "datapath events per second per CPU while an `xlane monitor` listens; the rest are counted as suppressed")
	monOn := fs.Bool("monitor", true, "load the programs with the monitor's hooks (for xlane monitor); false builds them out (the verifier removes them): packets pay nothing for the monitor, xlane monitor is refused, xlane trace still works (docs/observability.md)")
	uninstall := fs.Bool("uninstall", false, "remove everything this instance made (networks, endpoints, services, programs, pins, the state file) and exit; stop the running xlaned first")
	dockerSocket := fs.String("docker-plugin-socket", docker.DefaultSocket, "serve the Docker network driver here (Docker names it after the file; \"\" serves none)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics (docs/observability.md) on HOST:PORT, loopback only (127.0.0.1:9643, [::1]:9643), or on unix:/PATH; \"\" serves none")
	metricsRemote := fs.Bool("metrics-allow-remote", false, "let --metrics-addr listen on a non-loopback address (the metrics name endpoints and have no authentication)")
	bpfStats := fs.Bool("bpf-stats", false, "turn the kernel's BPF run statistics on while xlaned runs, for the per-program run time metrics (costs every BPF program on the machine ~20 ns per run)")
	nodeName := fs.String("node-name", "", "join a cluster as this node: its pods reach other nodes' pods (docs/multinode.md); the node record of this name (xlane node add) is this node")
	var clusterCIDRs stringList
	fs.Var(&clusterCIDRs, "cluster-cidr", "the cluster's pod prefix, every node's pod CIDR inside it (repeatable, or comma-separated: one IPv4, one IPv6); addresses in it no node owns are dropped (drop_no_peer)")
	routing := fs.String("routing", "", "vxlan (default) or native: how pods reach other nodes' pods: vxlan (overlay through xlaned's VXLAN device, a VNI per network) or native (routes to each node's pod CIDRs via its underlay address; nodes share an L2 underlay)")
	vxlanPort := fs.Int("vxlan-port", cluster.DefaultVXLANPort, "UDP port of the VXLAN overlay (the same on every node)")
	overlayEncap := fs.String("overlay-encap", "", "bpf, device or auto (default): how this node puts pod traffic on the VXLAN overlay: bpf (the tc program pushes the outer headers and redirects to the underlay device) or device (it sets the tunnel key and the VXLAN device encapsulates); auto is what measured faster (docs/multinode.md). Receiving is the VXLAN device's either way")
	encryption := fs.String("encryption", "", "wireguard or none (default): encrypt the traffic between this cluster's nodes (docs/encryption.md): the overlay goes inside WireGuard; the key pair is made at the first start and kept in the state file; give every peer's public key (xlane status shows this node's) with xlane node add --wg-public-key or in --nodes")
	wgPort := fs.Int("wireguard-port", 0, "with --encryption wireguard: its UDP port, the same on every node (default 51871)")
	wgStrict := fs.Bool("encryption-strict", false, "with --encryption wireguard: a peer without a working WireGuard session gets none of the pods' traffic (dropped, counted as drop_unencrypted) instead of the overlay in cleartext (the default falls back, and xlane status and the metrics say so)")
	wgNode := fs.Bool("encryption-node", false, "with --encryption wireguard: the node's own traffic to the other nodes' underlay addresses goes through WireGuard too, except the control traffic that must stay clear: WireGuard's own UDP, ICMP (the peer probes), UDP to the VXLAN port (the cleartext fallback) and, with --kubernetes, TCP to the API server (docs/encryption.md)")
	wgEngine := fs.String("wireguard-engine", "", "with --encryption wireguard: auto (default: the kernel's WireGuard where the kernel has it, else the embedded wireguard-go on a TUN device), kernel or embedded")
	peerProbe := fs.Duration("peer-probe", cluster.DefaultPeerProbeInterval, "how often each peer node's underlay address is probed (ICMP echo); a peer silent for 3 intervals is down: its pods' packets are dropped (drop_peer_down) until it answers again; 0: never probe")
	nodesFile := fs.String("nodes", "", "a JSON file of node records ([{\"name\", \"underlay\": [...], \"pod_cidrs\": [...]}]), watched: the nodes follow it (nodes not in it are removed)")
	kube := fs.Bool("kubernetes", false, "Kubernetes mode (docs/kubernetes.md): Nodes, Services and EndpointSlices from the API server program nodes and services (a kube-proxy replacement); needs --node-name, this node's Node name")
	kubeconfig := fs.String("kubeconfig", "", "with --kubernetes: the kubeconfig file (\"\": the in-cluster service account)")
	apiServer := fs.String("k8s-api-server", "", "with --kubernetes: the API server's address, https://HOST:PORT or HOST:PORT, instead of the kubeconfig's or the in-cluster one (the kubernetes Service's ClusterIP, which without kube-proxy nothing translates before xlaned runs); the DaemonSet takes it from its ConfigMap")
	lbIPAM := fs.Bool("k8s-lb-ipam", true, "with --kubernetes: hand LoadBalancer addresses to Services of type LoadBalancer (no loadBalancerClass, or xlane.dev/lb) from the pools of ConfigMap kube-system/xlane-lb-pools (docs/bgp.md); one xlaned of the cluster allocates at a time (Lease xlane-lb-ipam)")
	qemu := fs.String("qemu", vm.DefaultQEMU, "the qemu-system-x86_64 (name in PATH or path) whose netdev backends decide which VM endpoint backends this node offers (af-xdp: see docs/vm.md)")
	bgpFlags := addBGPFlags(fs)
	showVersion := fs.Bool("version", false, "print the version, the git commit and the build date, and exit")
	hub := hubbleFlags(fs)
	calib := fs.Bool("calibrate-at-start", true, "when this node has no calibration yet, measure in the background (~14 s of TCP between throwaway namespaces, hidden from listings) which mode and BIG TCP setting auto takes; `xlane calibrate` measures anew")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: xlaned [flags]

xlaned runs xlane on this node: it keeps networks and endpoints in its state
file, programs the kernel to match, and serves the API the xlane CLI uses.
Programs stay attached when xlaned stops (even with kill -9); a restarted
xlaned adopts them. Several daemons can run side by side, each in its own
network namespace with its own --state, --socket and --pin-dir.
xlaned is also Docker's network driver "xlane" (see --docker-plugin-socket
and docs/docker.md).

Examples:
  xlaned --uplink eth0                                   # the defaults: /var/lib/xlane/state.db, /run/xlane/xlane.sock, /sys/fs/bpf/xlane
  xlaned --uplink eth0 --metrics-addr 127.0.0.1:9643     # with Prometheus metrics
  xlaned --state /tmp/n1/state.db --socket /tmp/n1/xlane.sock --pin-dir /sys/fs/bpf/n1 --docker-plugin-socket= --calibrate-at-start=false   # a second daemon (in its own netns)
  xlaned --uplink eth0 --node-name node1 --cluster-cidr 10.244.0.0/16   # a node of a cluster (docs/multinode.md)
  xlaned --uplink eth0 --node-name node1 --cluster-cidr 10.244.0.0/16 --encryption wireguard   # ... encrypted between nodes (docs/encryption.md)
  xlaned --uplink eth0 --node-name node1 --cluster-cidr 10.244.0.0/16 --encryption wireguard --encryption-strict   # ... never in cleartext
  xlaned --uplink eth0 --node-name node1 --cluster-cidr 10.244.0.0/16 --encryption wireguard --encryption-node   # ... and the nodes' own traffic too
  xlaned --kubernetes --node-name node1 --cluster-cidr 10.244.0.0/16    # Kubernetes mode (docs/kubernetes.md)
  xlaned --uplink eth0 --hubble                          # flows for the hubble CLI: hubble observe --server unix:///run/xlane/hubble.sock (docs/hubble.md)
  xlaned --uplink eth0 --hubble --hubble-export-file-path /var/log/xlane/flows.log --hubble-export-allowlist '{"verdict":["DROPPED"]}'   # ... and the drops as JSON lines, rotated at 10M
  xlaned --uplink eth0 --bgp-asn 65001 --bgp-router-id 192.0.2.11   # a BGP speaker; peers: xlane bgp peer add (docs/bgp.md)
  xlaned --uninstall                                     # (stopped) remove everything xlane made on this node
  xlaned --version

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	// flag stops at the first word that is not a flag and leaves it and
	// every flag after it unparsed: `xlaned --metrics-addr ADDR stray
	// --uplink eth0` would start without its uplink.
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: xlaned takes flags only (the flags after a word that is not one are not read); see xlaned --help", fs.Arg(0))
	}
	if *showVersion {
		fmt.Println("xlaned", version.Get())
		return nil
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level %q: %w", *level, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	if *kube && !*uninstall {
		// Before anything is touched: a bad configuration fails the start.
		if *nodeName == "" {
			return fmt.Errorf("--kubernetes: --node-name is missing (this node's Node name)")
		}
		if _, err := k8s.RESTConfig(*kubeconfig, *apiServer); err != nil {
			return fmt.Errorf("--kubernetes: %w", err)
		}
	}
	if err := hub.validate(*uninstall); err != nil {
		return err
	}
	bgpCfg, err := bgpFlags.config(*uplink, *routing)
	if err != nil && !*uninstall {
		return err
	}
	var ml net.Listener
	if *metricsAddr != "" && !*uninstall {
		// Before anything is touched: a bad address fails the start.
		if ml, err = metrics.Listen(*metricsAddr, *metricsRemote); err != nil {
			return err
		}
		defer ml.Close()
	}
	ccfg := cluster.Config{NodeName: *nodeName, ClusterCIDRs: clusterCIDRs, Routing: *routing, VXLANPort: *vxlanPort,
		OverlayEncap: *overlayEncap, NodesFile: *nodesFile, PeerProbeInterval: *peerProbe,
		Encryption: *encryption, WireGuardPort: *wgPort, WireGuardEngine: *wgEngine, EncryptionStrict: *wgStrict, EncryptionNode: *wgNode}
	if *wgNode && *kube && !*uninstall {
		if ccfg.EncryptionClearTCP, err = apiServerClear(*kubeconfig, *apiServer); err != nil {
			return err
		}
	}
	if err := cluster.CheckConfig(ccfg); err != nil {
		return err // before anything is opened
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	d, err := xlaned.Start(ctx, daemon.Config{StatePath: *state, PinDir: *pinDir, Log: log, Uplink: *uplink, UplinkTakeover: *takeover, UplinkXDPMode: *xdpMode,
		CTSize: uint32(*ctSize), NATPorts: *natPorts, ServiceNoBackend: *noBackend, GCInterval: *gcEvery, AccelCaseTimeout: *accelCase, BPFStats: *bpfStats && !*uninstall,
		Cluster: ccfg, CalibrateAtStart: *calib && !*uninstall, MonitorRate: uint32(*monRate), NoMonitor: !*monOn, QEMU: *qemu,
		AutoBPFOnly: *kube})
	if err != nil {
		return err
	}
	if *uninstall {
		return d.Uninstall()
	}
	defer d.Close()
	log = d.Logger() // the health summary's last error sees every part's
	pods, err := hub.start(d, *nodeName, *kube)
	if err != nil {
		return err
	}
	l, err := server.Listen(*socket)
	if err != nil {
		return err
	}
	var speaker *bgp.Speaker
	if bgpCfg != nil {
		bgpCfg.Events = d.Observe().Event // xlane monitor -t bgp
		if speaker, err = bgp.New(d.Core(), *bgpCfg); err != nil {
			return err
		}
		defer speaker.Close()
	}
	pools := lbipam.New(d.Core().Store())
	handler := server.WithBGP(server.Handler(d, log), speaker, pools, log)
	if ml != nil {
		reg := metrics.New(metrics.Extend(d.Reporter(), speaker.Metrics), version.Get(), log)
		handler = reg.Instrument(handler)
		msrv := &http.Server{Handler: reg.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := msrv.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics endpoint stopped", "err", err)
			}
		}()
		defer msrv.Close()
		log.Info("serving metrics", "addr", *metricsAddr)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	stopDocker, err := docker.Serve(*dockerSocket, docker.New(d, log), log)
	if err != nil {
		return err
	}
	defer stopDocker()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if *kube {
		// In the background: the API (and the CNI plugin with it) serves
		// while the API server is out of reach.
		go func() {
			cfg := k8s.Config{Kubeconfig: *kubeconfig, APIServer: *apiServer, NodeName: *nodeName, Nodes: len(clusterCIDRs) > 0, Log: log, Pods: pods}
			if e := d.Cluster().Info().Encryption; e != nil {
				cfg.WGPublicKey = e.PublicKey // published on this node's Node
				cfg.WGKeys = d.Cluster().KeyChanges()
			}
			if err := k8s.Run(ctx, cfg, d); err != nil && ctx.Err() == nil {
				log.Error("kubernetes: first sync failed, retrying", "err", err)
			}
		}()
		if *lbIPAM {
			go runLBIPAM(ctx, pools, *kubeconfig, *apiServer, *nodeName, log)
		}
		if speaker != nil && *nodeName != "" {
			go runBGPPeers(ctx, speaker, *kubeconfig, *apiServer, *nodeName, log)
		}
	}
	log.Info("xlaned ready", "version", daemon.Version, "commit", version.Get().Commit, "socket", *socket, "state", *state, "pin_dir", *pinDir)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	os.Remove(*socket)
	log.Info("xlaned stopped; the datapath keeps running")
	return nil
}

// stringList is a repeatable, comma-separated flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}
