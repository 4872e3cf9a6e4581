package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/xlane-dev/xlane/internal/bgp"
	"github.com/xlane-dev/xlane/internal/k8s"
	"github.com/xlane-dev/xlane/internal/lbipam"
	"github.com/xlane-dev/xlane/internal/model"
)

// bgpFlags are xlaned's --bgp-* flags (internal/bgp, docs/bgp.md).
type bgpFlags struct {
	asn          *uint
	routerID     *string
	listenPort   *int
	restartTime  *time.Duration
	stop         *string
	learn        *string
	podCIDRs     *bool
	lb           *bool
	serviceCIDRs stringList
	podComms     stringList
}

func addBGPFlags(fs *flag.FlagSet) *bgpFlags {
	f := &bgpFlags{
		asn:         fs.Uint("bgp-asn", 0, "run a BGP speaker with this AS number (1-4294967294; 0: none): it announces this node's pod CIDRs and the service VIPs inside LB pools to the peers of `xlane bgp peer add` (docs/bgp.md)"),
		routerID:    fs.String("bgp-router-id", "", "with --bgp-asn: the speaker's router ID, an IPv4 address (\"\": --uplink's first IPv4 address)"),
		listenPort:  fs.Int("bgp-listen-port", 0, "with --bgp-asn: accept BGP sessions on this TCP port too (0: only connect out to the peers, on their port 179)"),
		restartTime: fs.Duration("bgp-restart-time", 120*time.Second, "with --bgp-asn: the graceful restart time announced to peers: how long they keep this node's routes while xlaned restarts or after kill -9 (the datapath keeps serving); 0 turns graceful restart off"),
		stop:        fs.String("bgp-stop", bgp.StopGraceful, "with --bgp-asn: what stopping xlaned does to its routes: graceful (the peers keep them for --bgp-restart-time: a restart) or withdraw (each session ends with a Cease and the peers drop them: the node leaves)"),
		learn:       fs.String("bgp-learn", "auto", "with --bgp-asn: install the routes the peers send into the kernel (proto bgp; not a default route, nor a prefix the node has another route to): on, off, or auto (on with --routing native: pods of nodes on other segments are reached through the router)"),
		podCIDRs:    fs.Bool("bgp-advertise-pod-cidrs", true, "with --bgp-asn: announce this node's pod CIDRs (its node record's, with --node-name; else its networks' subnets)"),
		lb:          fs.Bool("bgp-advertise-lb", true, "with --bgp-asn: announce each service VIP inside an LB pool (xlane lb-pool create) as a host route while the service has a backend taking new flows"),
	}
	fs.Var(&f.serviceCIDRs, "bgp-advertise-service-cidr", "with --bgp-asn: announce this prefix too, as it is (the cluster's ClusterIP range; repeatable)")
	fs.Var(&f.podComms, "bgp-pod-community", "with --bgp-asn: a community (AS:VALUE, no-export ...) on the pod CIDR announcements (repeatable)")
	return f
}

// config is the speaker's configuration, nil without --bgp-asn.
// Without --bgp-router-id the router ID is the uplink's first IPv4 address.
func (f *bgpFlags) config(uplink, routing string) (*bgp.Config, error) {
	if *f.asn == 0 {
		return nil, nil
	}
	if *f.asn > 1<<32-1 {
		return nil, model.Fieldf("bgp-asn", "%d: want 1-4294967294", *f.asn)
	}
	cfg := &bgp.Config{ASN: uint32(*f.asn), ListenPort: *f.listenPort, RestartTime: *f.restartTime, Stop: *f.stop,
		Advertise: bgp.Advertise{PodCIDRs: *f.podCIDRs, LoadBalancer: *f.lb}}
	switch *f.learn {
	case "on":
		cfg.InstallRoutes = true
	case "auto":
		cfg.InstallRoutes = routing == string(model.RoutingNative)
	case "off":
	default:
		return nil, model.Fieldf("bgp-learn", "%q: want on, off or auto", *f.learn)
	}
	var err error
	switch {
	case *f.routerID != "":
		if cfg.RouterID, err = netip.ParseAddr(*f.routerID); err != nil {
			return nil, model.Fieldf("bgp-router-id", "%q: not an IPv4 address", *f.routerID)
		}
	case uplink != "":
		if cfg.RouterID = firstIPv4(uplink); !cfg.RouterID.IsValid() {
			return nil, model.Fieldf("bgp-router-id", "missing, and the uplink %s has no IPv4 address to take: give the speaker's router ID (an IPv4 address)", uplink)
		}
	default:
		return nil, model.Fieldf("bgp-router-id", "missing: --bgp-asn needs the speaker's router ID (an IPv4 address; without it, --uplink's first)")
	}
	for _, s := range f.serviceCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, model.Fieldf("bgp-advertise-service-cidr", "%q: not a prefix", s)
		}
		cfg.Advertise.ServiceCIDRs = append(cfg.Advertise.ServiceCIDRs, p)
	}
	if cfg.Advertise.PodCommunities, err = bgp.ParseCommunities("bgp-pod-community", f.podComms); err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

// firstIPv4 is the first IPv4 address of the device called name.
func firstIPv4(name string) netip.Addr {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
				return ip.Unmap()
			}
		}
	}
	return netip.Addr{}
}

// kubeClient is a clientset for Kubernetes mode's side tasks.
func kubeClient(kubeconfig, apiServer string) (*kubernetes.Clientset, error) {
	rc, err := k8s.RESTConfig(kubeconfig, apiServer)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// runLBIPAM runs Kubernetes mode's LoadBalancer address allocator
// (internal/lbipam) until ctx ends.
func runLBIPAM(ctx context.Context, pools *lbipam.Pools, kubeconfig, apiServer, nodeName string, log *slog.Logger) {
	cs, err := kubeClient(kubeconfig, apiServer)
	if err == nil {
		ns := os.Getenv("POD_NAMESPACE")
		err = pools.RunKubernetes(ctx, cs, lbipam.KubeConfig{Namespace: ns, Identity: nodeName, Log: log})
	}
	if err != nil {
		log.Error("kubernetes: LoadBalancer address allocation stopped", "err", err)
	}
}

// runBGPPeers keeps the speaker's peers of this node's Node annotation
// xlane.dev/bgp-peers (internal/bgp/kube.go) until ctx ends.
func runBGPPeers(ctx context.Context, speaker *bgp.Speaker, kubeconfig, apiServer, nodeName string, log *slog.Logger) {
	cs, err := kubeClient(kubeconfig, apiServer)
	if err != nil {
		log.Error("kubernetes: bgp peers from the Node annotation stopped", "err", err)
		return
	}
	speaker.RunNodePeers(ctx, cs, nodeName)
}
