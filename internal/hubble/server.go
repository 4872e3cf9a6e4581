package hubble

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	peerpb "github.com/cilium/cilium/api/v1/peer"
	relaypb "github.com/cilium/cilium/api/v1/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/observe"
)

// Defaults of Config.
const (
	DefaultSocket = "/run/xlane/hubble.sock"
	DefaultFlows  = 4096
	DefaultKeep   = 5 * time.Minute
	// MaxFlows bounds the ring (records of recordBytes each).
	MaxFlows = 1 << 20
)

// Config is what xlaned's flags say about the Hubble server.
type Config struct {
	// Socket is the unix socket the services listen on ("": none).
	Socket string
	// Listen is a TCP HOST:PORT the services listen on too ("": none);
	// with TLSCert and TLSKey it serves TLS, with TLSClientCA it also
	// requires client certificates signed by it (mutual TLS, as Relay
	// dials its peers).
	Listen                       string
	TLSCert, TLSKey, TLSClientCA string
	// Flows is the ring's size in flows (0: DefaultFlows).
	Flows int
	// Keep is how long the names of an endpoint or pod that went away
	// stay known (0: DefaultKeep).
	Keep time.Duration
	// NodeName is this node's name in flows and GetNodes (the cluster's
	// node name, or the hostname).
	NodeName string
	// Version is xlaned's version (ServerStatus, GetNodes).
	Version string
	// ExportPath, when set, is where every flow that ExportAllow and
	// ExportDeny pass is written as a JSON line (export.go): a file,
	// rotated before it grows past ExportMaxSize bytes (0:
	// DefaultExportMaxSize) with ExportMaxBackups older files kept, or
	// ExportStdout.
	ExportPath       string
	ExportMaxSize    int64
	ExportMaxBackups int
	// ExportAllow and ExportDeny are FlowFilters in JSON (ParseFilters):
	// a flow is exported if it matches one of the allow list's (or the
	// list is empty) and none of the deny list's.
	ExportAllow, ExportDeny string
}

// Deps are what other parts of xlaned tell the Hubble server.
type Deps struct {
	// Observer is the observability feature: the monitor the flows come
	// from.
	Observer *observe.Observer
	// Pods lists the cluster's pods (Kubernetes mode; nil: none).
	Pods func() []model.Pod
	// Nodes lists the cluster's nodes (Peer's Notify; nil: alone).
	Nodes func() ([]model.Node, error)
}

// Server is xlaned's Hubble server: the flow ring, its feed and the gRPC
// services.
type Server struct {
	observerpb.UnimplementedObserverServer
	peerpb.UnimplementedPeerServer

	c       core.Core
	cfg     Config
	deps    Deps
	ring    *ring
	feed    *feed
	feedErr error
	ids     *identities
	export  *exporter // nil: no export
	grpc    []*grpc.Server
	// followers is how many GetFlows streams follow now; skipped what
	// followers too slow for the ring missed (overwritten before read).
	followers, skipped atomic.Int64
}

// Validate checks cfg; errors name the flag.
func (cfg *Config) Validate() error {
	if cfg.Flows < 0 || cfg.Flows > MaxFlows {
		return fmt.Errorf("--hubble-flows %d: want 1 to %d (0: %d)", cfg.Flows, MaxFlows, DefaultFlows)
	}
	if cfg.Socket == "" && cfg.Listen == "" {
		return errors.New("--hubble: neither --hubble-socket nor --hubble-listen-address: nothing to serve on")
	}
	if cfg.Listen != "" {
		if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
			return fmt.Errorf("--hubble-listen-address %q: want HOST:PORT: %w", cfg.Listen, err)
		}
		if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
			return errors.New("--hubble-tls-cert and --hubble-tls-key go together")
		}
	}
	if cfg.TLSClientCA != "" && cfg.TLSCert == "" {
		return errors.New("--hubble-tls-client-ca needs --hubble-tls-cert and --hubble-tls-key")
	}
	if cfg.ExportPath == "" {
		if cfg.ExportAllow != "" || cfg.ExportDeny != "" {
			return errors.New("--hubble-export-allowlist and --hubble-export-denylist need --hubble-export-file-path")
		}
		return nil
	}
	if cfg.ExportMaxSize != 0 && cfg.ExportMaxSize < minExportSize {
		return fmt.Errorf("--hubble-export-file-max-size %d: want at least %d bytes (0: %d)", cfg.ExportMaxSize, minExportSize, DefaultExportMaxSize)
	}
	if cfg.ExportMaxBackups < 0 {
		return fmt.Errorf("--hubble-export-file-max-backups %d: want 0 or more", cfg.ExportMaxBackups)
	}
	_, _, err := cfg.exportFilters()
	return err
}

// defaults fills what cfg leaves to them.
func (cfg *Config) defaults() {
	if cfg.Flows == 0 {
		cfg.Flows = DefaultFlows
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.ExportMaxSize == 0 {
		cfg.ExportMaxSize = DefaultExportMaxSize
	}
	if cfg.Listen == "" {
		// TLS is the TCP listener's (the DaemonSet names its files
		// whether or not it listens): the socket is plain, and so
		// are the peers Notify gives.
		cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = "", "", ""
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
	}
}

// Start makes the ring, subscribes it to the monitor, and serves the
// Observer and Peer services until c is done. A monitor that is off
// (xlaned --monitor=false) leaves the ring empty, and ServerStatus and the
// log say why; a listener that cannot be opened fails the start.
func Start(c core.Core, cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	s := &Server{c: c, cfg: cfg, deps: deps, ring: newRing(cfg.Flows)}
	s.ids = &identities{c: c, pods: deps.Pods, node: cfg.NodeName, keep: cfg.Keep}
	s.ids.refresh()
	go s.ids.run(c.Done())
	var ls []net.Listener
	var creds []credentials.TransportCredentials
	fail := func(err error) (*Server, error) {
		for _, l := range ls {
			l.Close()
		}
		return nil, err
	}
	if cfg.Socket != "" {
		l, err := api.ListenUnix(cfg.Socket)
		if err != nil {
			return fail(fmt.Errorf("--hubble-socket: %w", err))
		}
		ls, creds = append(ls, l), append(creds, nil)
	}
	if cfg.Listen != "" {
		var cr credentials.TransportCredentials
		if cfg.TLSCert != "" {
			tc, err := cfg.tlsConfig()
			if err != nil {
				return fail(err)
			}
			cr = credentials.NewTLS(tc)
		}
		l, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fail(fmt.Errorf("--hubble-listen-address: %w", err))
		}
		ls, creds = append(ls, l), append(creds, cr)
	}
	if cfg.ExportPath != "" {
		var err error
		if s.export, err = s.startExport(c.Done()); err != nil {
			return fail(err)
		}
	}
	s.feed = &feed{ring: s.ring, interned: map[string]string{}}
	if deps.Observer == nil {
		s.feedErr = errors.New("no observability feature")
	} else if err := s.feed.subscribe(deps.Observer, c.Done()); err != nil {
		s.feedErr = err
		c.Log().Warn("hubble: no flows", "err", err)
	} else {
		deps.Observer.SetNamer(s.ids.name) // xlane monitor's events get the same names
	}
	for i, l := range ls {
		var opts []grpc.ServerOption
		if creds[i] != nil {
			opts = append(opts, grpc.Creds(creds[i]))
		}
		g := grpc.NewServer(opts...)
		observerpb.RegisterObserverServer(g, s)
		// hubble status asks gRPC's health service about the observer
		// first.
		hs := health.NewServer()
		hs.SetServingStatus("hubble.server.Observer", healthpb.HealthCheckResponse_SERVING) // pkg/hubble/api/v1 ObserverServiceName
		healthpb.RegisterHealthServer(g, hs)
		peerpb.RegisterPeerServer(g, s)
		s.grpc = append(s.grpc, g)
		go func() {
			if err := g.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				c.Log().Error("hubble: serve", "addr", l.Addr().String(), "err", err)
			}
		}()
		c.Log().Info("hubble: serving", "addr", l.Addr().String(), "tls", creds[i] != nil, "flows", cfg.Flows)
	}
	go func() {
		<-c.Done()
		s.Close()
	}()
	return s, nil
}

func (cfg *Config) tlsConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--hubble-tls-cert/--hubble-tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("--hubble-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--hubble-tls-client-ca %s: no PEM certificate in it", cfg.TLSClientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Close stops the services (their streams end) and removes the socket.
func (s *Server) Close() {
	if s == nil {
		return
	}
	for _, g := range s.grpc {
		g.Stop()
	}
	if s.cfg.Socket != "" {
		os.Remove(s.cfg.Socket)
	}
}

// Status is the server's part of `xlane status`.
func (s *Server) Status() *api.HubbleStatus {
	if s == nil {
		return nil
	}
	st := &api.HubbleStatus{Socket: s.cfg.Socket, Listen: s.cfg.Listen, TLS: s.cfg.TLSCert != "",
		Flows: s.ring.len(), MaxFlows: s.ring.cap(), Seen: s.ring.seen(),
		RingBytes: s.ring.cap() * uint64(recordBytes), Followers: s.followers.Load(), Skipped: uint64(s.skipped.Load()),
		FeedDropped: s.feed.dropped.Load(), Suppressed: s.feed.suppressed.Load(), RingLost: s.feed.lost.Load()}
	st.Identities, st.IdentitiesGone = s.ids.size()
	if e := s.export; e != nil {
		st.Export = &api.HubbleExport{Path: s.cfg.ExportPath, Lines: e.exported.Load(), Lost: e.lost.Load(), Errors: e.errs.Load()}
		if p := e.lastErr.Load(); p != nil {
			st.Export.LastError = *p
		}
	}
	if s.feedErr != nil {
		st.Error = s.feedErr.Error()
	}
	return st
}

// ServerStatus is Observer's: the ring's fill and the flows seen.
func (s *Server) ServerStatus(context.Context, *observerpb.ServerStatusRequest) (*observerpb.ServerStatusResponse, error) {
	return &observerpb.ServerStatusResponse{NumFlows: s.ring.len(), MaxFlows: s.ring.cap(), SeenFlows: s.ring.seen(),
		UptimeNs: uint64(time.Since(s.ring.start)), Version: s.cfg.Version, FlowsRate: s.feed.rate()}, nil
}

// GetNodes is this node (a Relay lists the cluster's).
func (s *Server) GetNodes(context.Context, *observerpb.GetNodesRequest) (*observerpb.GetNodesResponse, error) {
	return &observerpb.GetNodesResponse{Nodes: []*observerpb.Node{{Name: s.cfg.NodeName, Version: s.cfg.Version,
		Address: s.address(), State: relaypb.NodeState_NODE_CONNECTED, Tls: &observerpb.TLS{Enabled: s.cfg.TLSCert != ""},
		UptimeNs: uint64(time.Since(s.ring.start)), NumFlows: s.ring.len(), MaxFlows: s.ring.cap(), SeenFlows: s.ring.seen()}}}, nil
}

// GetNamespaces lists the namespaces of the flows in the ring.
func (s *Server) GetNamespaces(context.Context, *observerpb.GetNamespacesRequest) (*observerpb.GetNamespacesResponse, error) {
	s.ids.fresh()
	seen := map[string]bool{}
	oldest, next, _ := s.ring.bounds()
	var r record
	for seq := oldest; seq < next; seq++ {
		if !s.ring.get(seq, &r) {
			continue
		}
		for _, a := range []netip.Addr{r.src, r.dst} {
			if id := s.ids.lookup(a); id != nil && id.namespace != "" {
				seen[id.namespace] = true
			}
		}
	}
	out := &observerpb.GetNamespacesResponse{}
	for _, ns := range slicesSorted(seen) {
		out.Namespaces = append(out.Namespaces, &observerpb.Namespace{Namespace: ns})
	}
	return out, nil
}

// address is where this node's services are: the TCP address (with the
// node's underlay address for an unspecified host), else the socket.
func (s *Server) address() string {
	if s.cfg.Listen == "" {
		return "unix://" + s.cfg.Socket
	}
	return s.cfg.Listen
}

// GetFlows streams the ring's flows matching the request, then, with
// follow, new ones as they come.
func (s *Server) GetFlows(req *observerpb.GetFlowsRequest, stream grpc.ServerStreamingServer[observerpb.GetFlowsResponse]) error {
	wl, err := compileFilters("whitelist", req.GetWhitelist())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	bl, err := compileFilters("blacklist", req.GetBlacklist())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetFirst() && req.GetFollow() {
		return status.Error(codes.InvalidArgument, "first and follow: first reads the oldest flows, follow waits for new ones")
	}
	var since, until time.Time
	if t := req.GetSince(); t != nil {
		if err := t.CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "since: %v", err)
		}
		since = t.AsTime()
	}
	if t := req.GetUntil(); t != nil {
		if err := t.CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "until: %v", err)
		}
		until = t.AsTime()
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		return status.Error(codes.InvalidArgument, "until is before since")
	}
	s.ids.fresh()
	match := func(r *record) *flowpb.Flow {
		t := time.Unix(0, r.time)
		if (!since.IsZero() && t.Before(since)) || (!until.IsZero() && t.After(until)) {
			return nil
		}
		f := s.toFlow(r)
		if (len(wl) > 0 && !wl.any(f)) || bl.any(f) {
			return nil
		}
		return f
	}
	send := func(f *flowpb.Flow) error { return stream.Send(s.flowResponse(f)) }
	oldest, next, wait := s.ring.bounds()
	number := req.GetNumber()
	var r record
	switch {
	case req.GetFollow() && number == 0 && since.IsZero():
		// Only what comes from now on.
	case number > 0 && !req.GetFirst():
		// The last number matching flows, oldest first.
		var last []*flowpb.Flow
		for seq := next; seq > oldest && uint64(len(last)) < number; seq-- {
			if s.ring.get(seq-1, &r) {
				if f := match(&r); f != nil {
					last = append(last, f)
				}
			}
		}
		for i := len(last) - 1; i >= 0; i-- {
			if err := send(last[i]); err != nil {
				return err
			}
		}
	default:
		sent := uint64(0)
		for seq := oldest; seq < next && (number == 0 || sent < number); seq++ {
			if s.ring.get(seq, &r) {
				if f := match(&r); f != nil {
					if err := send(f); err != nil {
						return err
					}
					sent++
				}
			}
		}
	}
	if !req.GetFollow() {
		return nil
	}
	s.followers.Add(1)
	defer s.followers.Add(-1)
	err = s.follow(stream.Context().Done(), next, wait, func(r *record) error {
		if !until.IsZero() && time.Unix(0, r.time).After(until) {
			return errUntil
		}
		if f := match(r); f != nil {
			return send(f)
		}
		return nil
	}, func(lost uint64) error {
		s.skipped.Add(int64(lost))
		return stream.Send(s.lostResponse(lost))
	}, nil)
	if errors.Is(err, errUntil) {
		return nil
	}
	return err
}

func (s *Server) flowResponse(f *flowpb.Flow) *observerpb.GetFlowsResponse {
	return &observerpb.GetFlowsResponse{ResponseTypes: &observerpb.GetFlowsResponse_Flow{Flow: f},
		NodeName: s.cfg.NodeName, Time: f.GetTime()}
}

// lostResponse tells a follower that n flows were overwritten in the ring
// before it read them.
func (s *Server) lostResponse(n uint64) *observerpb.GetFlowsResponse {
	return &observerpb.GetFlowsResponse{NodeName: s.cfg.NodeName, Time: timestamppb.Now(),
		ResponseTypes: &observerpb.GetFlowsResponse_LostEvents{LostEvents: &flowpb.LostEvent{
			Source: flowpb.LostEventSource_HUBBLE_RING_BUFFER, NumEventsLost: n}}}
}

// errUntil ends a follow at its until.
var errUntil = errors.New("until reached")

// follow calls fn with each record the ring gets from sequence number
// cursor on (wait: the ring's channel of when cursor was read), lost with
// how many the ring overwrote before follow got to them, and batch, if
// set, after each round, until done is closed or a call fails (its error
// returned). It reads the ring at its own pace: the ring's writer never
// waits for it.
func (s *Server) follow(done <-chan struct{}, cursor uint64, wait <-chan struct{}, fn func(*record) error,
	lost func(uint64) error, batch func()) error {
	var r record
	for {
		select {
		case <-done:
			return nil
		case <-wait:
		}
		select {
		case <-done:
			return nil
		default:
		}
		var first, next uint64
		first, next, wait = s.ring.bounds()
		if cursor < first {
			if err := lost(first - cursor); err != nil {
				return err
			}
			cursor = first
		}
		for ; cursor < next; cursor++ {
			if !s.ring.get(cursor, &r) {
				break // overwritten meanwhile: the next round counts it
			}
			if err := fn(&r); err != nil {
				return err
			}
		}
		if batch != nil {
			batch()
		}
	}
}

// Notify is Peer's: this node, and with a TCP listener every node of the
// cluster at its underlay address and the same port, then their changes.
func (s *Server) Notify(_ *peerpb.NotifyRequest, stream grpc.ServerStreamingServer[peerpb.ChangeNotification]) error {
	known := map[string]string{}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		cur := s.peers()
		for name, addr := range cur {
			typ := peerpb.ChangeNotificationType_PEER_ADDED
			if old, ok := known[name]; ok {
				if old == addr {
					continue
				}
				typ = peerpb.ChangeNotificationType_PEER_UPDATED
			}
			if err := stream.Send(s.peer(name, addr, typ)); err != nil {
				return err
			}
		}
		for name, addr := range known {
			if _, ok := cur[name]; !ok {
				if err := stream.Send(s.peer(name, addr, peerpb.ChangeNotificationType_PEER_DELETED)); err != nil {
					return err
				}
			}
		}
		known = cur
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.c.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Server) peer(name, addr string, typ peerpb.ChangeNotificationType) *peerpb.ChangeNotification {
	n := &peerpb.ChangeNotification{Name: name, Address: addr, Type: typ}
	if s.cfg.TLSCert != "" {
		n.Tls = &peerpb.TLS{ServerName: TLSServerName(name)}
	}
	return n
}

// TLSServerName is the name a node's certificate must carry for Relay,
// which checks its peers' certificates against it: one label for the
// node (its dots made dashes, as Cilium does), so that one certificate
// for *.hubble-grpc.xlane.local serves every node.
func TLSServerName(node string) string {
	return strings.ReplaceAll(node, ".", "-") + ".hubble-grpc.xlane.local"
}

// peers are the nodes by name with their services' addresses.
func (s *Server) peers() map[string]string {
	out := map[string]string{s.cfg.NodeName: s.address()}
	if s.cfg.Listen == "" || s.deps.Nodes == nil {
		return out
	}
	host, port, _ := net.SplitHostPort(s.cfg.Listen)
	nodes, err := s.deps.Nodes()
	if err != nil {
		s.c.Log().Warn("hubble: peers: list nodes", "err", err)
		return out
	}
	for _, n := range nodes {
		if len(n.Underlay) == 0 {
			continue
		}
		addr := net.JoinHostPort(n.Underlay[0].String(), port)
		if n.Self && host != "" && host != "0.0.0.0" && host != "::" {
			addr = s.cfg.Listen
		}
		out[n.Name] = addr
	}
	return out
}

func slicesSorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
