package main

import (
	"flag"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/hubble"
	"github.com/xlane-dev/xlane/internal/k8s"
)

// hubbleOpts are xlaned's --hubble flags (docs/hubble.md).
type hubbleOpts struct {
	on  *bool
	cfg hubble.Config
}

func hubbleFlags(fs *flag.FlagSet) *hubbleOpts {
	o := &hubbleOpts{}
	o.on = fs.Bool("hubble", false, "serve flows with workload names through Hubble's gRPC API (the stock hubble CLI, Hubble Relay): keeps the monitor on for drop, fw, flow_new, nat and lb events at --monitor-rate (docs/hubble.md)")
	fs.StringVar(&o.cfg.Socket, "hubble-socket", hubble.DefaultSocket, "with --hubble: the unix socket of the Hubble API (root only; \"\": none)")
	fs.StringVar(&o.cfg.Listen, "hubble-listen-address", "", "with --hubble: also serve the Hubble API on TCP HOST:PORT (:4244 as Cilium's agents; with --hubble-tls-cert and --hubble-tls-key, TLS)")
	fs.StringVar(&o.cfg.TLSCert, "hubble-tls-cert", "", "with --hubble-listen-address: the server certificate (PEM); Relay checks it names NODE.hubble-grpc.xlane.local (dots in NODE made dashes: *.hubble-grpc.xlane.local serves all) and, through the Peer service, hubble-peer.default.hubble-grpc.cilium.io")
	fs.StringVar(&o.cfg.TLSKey, "hubble-tls-key", "", "with --hubble-tls-cert: its key (PEM)")
	fs.StringVar(&o.cfg.TLSClientCA, "hubble-tls-client-ca", "", "with --hubble-tls-cert: require client certificates signed by this CA (PEM), as Relay presents")
	fs.IntVar(&o.cfg.Flows, "hubble-flows", hubble.DefaultFlows, "with --hubble: the flows kept for queries after the fact (a ring; `xlane status` shows its memory)")
	fs.DurationVar(&o.cfg.Keep, "hubble-keep-names", hubble.DefaultKeep, "with --hubble: how long an endpoint's or pod's names stay known after it is removed, for its recent flows")
	fs.StringVar(&o.cfg.ExportPath, "hubble-export-file-path", "", "with --hubble: also write the flows as JSON lines (as hubble observe -o json) to this file, rotated by size, or to \"stdout\"; e.g. /var/log/xlane/flows.log")
	o.cfg.ExportMaxSize = hubble.DefaultExportMaxSize
	fs.Func("hubble-export-file-max-size", "with --hubble-export-file-path: rotate the file before it grows past this size (bytes, or with K, M, G; default 10M)", func(v string) (err error) {
		o.cfg.ExportMaxSize, err = hubble.ParseSize(v)
		return err
	})
	fs.IntVar(&o.cfg.ExportMaxBackups, "hubble-export-file-max-backups", hubble.DefaultExportMaxBackups, "with --hubble-export-file-path: rotated files kept (PATH.1 the newest); 0: none")
	fs.StringVar(&o.cfg.ExportAllow, "hubble-export-allowlist", "", `with --hubble-export-file-path: export only flows matching one of these FlowFilters (JSON objects, as Cilium's: '{"verdict":["DROPPED"]} {"source_pod":["shop/"]}')`)
	fs.StringVar(&o.cfg.ExportDeny, "hubble-export-denylist", "", "with --hubble-export-file-path: never export flows matching one of these FlowFilters (JSON objects)")
	return o
}

// validate checks the flags before anything is touched.
func (o *hubbleOpts) validate(uninstall bool) error {
	if !*o.on || uninstall {
		return nil
	}
	return o.cfg.Validate()
}

// start serves the Hubble API on d's flows and adds its status; in
// Kubernetes mode the pods it names flows with come from the watch (the
// cache returned, for k8s.Config).
func (o *hubbleOpts) start(d *daemon.Daemon, node string, kube bool) (*k8s.PodCache, error) {
	if !*o.on {
		return nil, nil
	}
	var pods *k8s.PodCache
	deps := hubble.Deps{Observer: d.Observe()}
	if cl := d.Cluster(); cl != nil {
		deps.Nodes = cl.Nodes
	}
	if kube {
		pods = &k8s.PodCache{}
		deps.Pods = pods.List
	}
	o.cfg.NodeName, o.cfg.Version = node, daemon.Version
	s, err := hubble.Start(d.Core(), o.cfg, deps)
	if err != nil {
		return nil, err
	}
	d.AddStatus(func(st *api.Status) { st.Hubble = s.Status() })
	return pods, nil
}
