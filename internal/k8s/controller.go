package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xlane-dev/xlane/internal/api"
)

// Target is what the controller programs: the daemon.
type Target interface {
	// SyncNodes makes the cluster's nodes the given set.
	SyncNodes(want []api.NodeAdd) error
	// ApplyServices creates, updates and prunes services in one batch.
	ApplyServices(req api.ServiceApply) (*api.ServiceApplyResult, error)
}

// Config says how to reach the API server and who this node is.
type Config struct {
	// Kubeconfig is a kubeconfig file; "" is the in-cluster config (the
	// pod's service account).
	Kubeconfig string
	// NodeName is this node's Node name (xlaned --node-name).
	NodeName string
	// Nodes: the cluster's nodes follow the Node objects (xlaned joined a
	// cluster: --cluster-cidr); without it only services are synced.
	Nodes bool
	Log   *slog.Logger
}

// settle is how long a sync waits after the first event of a burst, so
// that one apply carries the burst (an informer's initial list, a rollout).
const settle = 10 * time.Millisecond

// retryAfter is when a sync that failed is tried again without an event.
const retryAfter = 2 * time.Second

// RESTConfig builds the client configuration: the kubeconfig file, or the
// in-cluster one when the path is "".
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	// Watches carry the load; the few lists at start must not wait on
	// the default 5 requests per second.
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "xlaned"
	return rc, nil
}

// Run watches the API server and programs t until ctx ends. It returns
// once the informers' caches are synced and the first sync applied
// (started reports it), then keeps running in the background; the error
// is the client's or the first sync's.
func Run(ctx context.Context, cfg Config, t Target) error {
	if cfg.NodeName == "" {
		return errors.New("kubernetes mode: --node-name is missing (this node's Node name)")
	}
	rc, err := RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	c := &controller{cfg: cfg, t: t, kick: make(chan struct{}, 1),
		nodes:    f.Core().V1().Nodes(),
		services: f.Core().V1().Services(),
		slices:   f.Discovery().V1().EndpointSlices()}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.wake() },
		UpdateFunc: func(any, any) { c.wake() },
		DeleteFunc: func(any) { c.wake() },
	}
	for _, inf := range []cache.SharedIndexInformer{c.nodes.Informer(), c.services.Informer(), c.slices.Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("kubernetes informer: %w", err)
		}
	}
	f.Start(ctx.Done())
	start := time.Now()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("kubernetes: %v cache did not sync: %w", typ, context.Cause(ctx))
		}
	}
	cfg.Log.Info("kubernetes: caches synced", "took", time.Since(start).Round(time.Millisecond))
	err = c.sync()
	go func() {
		defer f.Shutdown()
		c.loop(ctx, err != nil)
	}()
	return err
}

type controller struct {
	cfg      Config
	t        Target
	kick     chan struct{}
	nodes    coreinformers.NodeInformer
	services coreinformers.ServiceInformer
	slices   discoveryinformers.EndpointSliceInformer
}

func (c *controller) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// loop syncs after every burst of events, and retries a failed sync.
func (c *controller) loop(ctx context.Context, failed bool) {
	retry := time.NewTimer(retryAfter)
	if !failed {
		retry.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-retry.C:
		}
		time.Sleep(settle)
		select {
		case <-c.kick:
		default:
		}
		if err := c.sync(); err != nil {
			c.cfg.Log.Error("kubernetes sync", "err", err)
			retry.Reset(retryAfter)
		}
	}
}

// sync programs the whole state of the caches: nodes, then services.
func (c *controller) sync() error {
	start := time.Now()
	nodes, err := c.nodes.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	var self []netip.Addr
	var recs []api.NodeAdd
	for _, n := range nodes {
		if n.Name == c.cfg.NodeName {
			self = NodeAddrs(n)
		}
		if rec, ok := NodeRecord(n); ok {
			recs = append(recs, rec)
		}
	}
	var errs []error
	if c.cfg.Nodes {
		if err := c.t.SyncNodes(recs); err != nil {
			errs = append(errs, fmt.Errorf("sync nodes: %w", err))
		}
	}
	svcs, err := c.services.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	slices, err := c.slices.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	want, skipped := Translate(Input{Services: svcs, Slices: slices, NodeName: c.cfg.NodeName, NodeAddrs: self})
	for _, s := range skipped {
		c.cfg.Log.Warn("kubernetes: vip left out", "service", s.Service, "vip", s.VIP, "reason", s.Reason)
	}
	translated := time.Since(start)
	res, err := c.t.ApplyServices(api.ServiceApply{Services: want, Prune: true, PrunePrefix: NamePrefix})
	if err != nil {
		errs = append(errs, fmt.Errorf("apply services: %w", err))
	} else {
		c.cfg.Log.Info("kubernetes sync", "nodes", len(recs), "k8s_services", len(svcs), "vips", len(want),
			"created", res.Created, "updated", res.Updated, "deleted", res.Deleted,
			"translate", translated.Round(time.Microsecond), "took", time.Since(start).Round(time.Microsecond))
	}
	return errors.Join(errs...)
}
