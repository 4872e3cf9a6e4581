package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
)

// Target is what the controller programs: the daemon.
type Target interface {
	// SyncNodes makes the cluster's nodes the given set.
	SyncNodes(want []model.Node) error
	// ApplyServices creates, updates and prunes services in one batch.
	ApplyServices(req model.ServiceApply) (*model.ServiceApplyResult, error)
	// ApplyFirewallOwned makes the firewall rules named with prefix the
	// given ones, atomically, leaving every other rule alone.
	ApplyFirewallOwned(prefix string, owned []rules.Rule) error
}

// Config says how to reach the API server and who this node is.
type Config struct {
	// Kubeconfig is a kubeconfig file; "" is the in-cluster config (the
	// pod's service account).
	Kubeconfig string
	// APIServer, when set, is the API server's address (https://HOST:PORT
	// or HOST:PORT) instead of the kubeconfig's or the in-cluster one (the
	// `kubernetes` Service's ClusterIP, which on a cluster without
	// kube-proxy nothing translates before xlaned has synced).
	APIServer string
	// NodeName is this node's Node name (xlaned --node-name).
	NodeName string
	// Nodes: the cluster's nodes follow the Node objects (xlaned joined a
	// cluster: --cluster-cidr); without it only services are synced.
	Nodes bool
	Log   *slog.Logger
	// Pods, when set, is given the pod informer's cache (PodCache).
	Pods *PodCache
	// WGPublicKey is this node's WireGuard public key (xlaned --encryption
	// wireguard; "": off), published on its Node as AnnotationWGPublicKey.
	WGPublicKey string
	// WGKeys brings this node's new public keys (xlane node rotate-key),
	// each published when it comes (nil: the key never changes).
	WGKeys <-chan string
}

// settle is how long a sync waits after the first event of a burst, so
// that one apply carries the burst (an informer's initial list, a rollout).
const settle = 10 * time.Millisecond

// retryAfter is when a sync that failed is tried again without an event.
const retryAfter = 2 * time.Second

// The pod's service account, as rest.InClusterConfig reads it.
var (
	saTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	saCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// APIServerURL checks an API server address (https://HOST:PORT, or
// HOST:PORT for https) and returns it as a URL; errors name
// --k8s-api-server.
func APIServerURL(s string) (string, error) {
	u := s
	if !strings.Contains(u, "://") {
		u = "https://" + u
	}
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return "", fmt.Errorf("--k8s-api-server %q: %w", s, err)
	case p.Scheme != "https":
		return "", fmt.Errorf("--k8s-api-server %q: the scheme must be https", s)
	case p.Hostname() == "" || p.Port() == "":
		return "", fmt.Errorf("--k8s-api-server %q: want https://HOST:PORT or HOST:PORT (IPv6: [ADDR]:PORT)", s)
	case p.Path != "" && p.Path != "/" || p.RawQuery != "" || p.User != nil:
		return "", fmt.Errorf("--k8s-api-server %q: want only a host and port", s)
	}
	return "https://" + p.Host, nil
}

// RESTConfig builds the client configuration: the kubeconfig file, or the
// in-cluster one when the path is "". apiServer, when set, replaces the
// address either would use (APIServerURL); in-cluster, the service
// account's token and CA are still the pod's.
func RESTConfig(kubeconfig, apiServer string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	host := ""
	if apiServer != "" {
		if host, err = APIServerURL(apiServer); err != nil {
			return nil, err
		}
	}
	switch {
	case kubeconfig != "":
		rc, err = clientcmd.BuildConfigFromFlags(host, kubeconfig)
	case host != "":
		// rest.InClusterConfig without its KUBERNETES_SERVICE_HOST.
		if _, err = os.Stat(saTokenFile); err == nil {
			_, err = os.Stat(saCAFile)
		}
		rc = &rest.Config{Host: host, BearerTokenFile: saTokenFile, TLSClientConfig: rest.TLSClientConfig{CAFile: saCAFile}}
	default:
		rc, err = rest.InClusterConfig()
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
	rc, err := RESTConfig(cfg.Kubeconfig, cfg.APIServer)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	return runWith(ctx, cfg, cs, dyn, t, "")
}

// run is Run with a client (a fake one in tests).
func run(ctx context.Context, cfg Config, cs kubernetes.Interface, t Target) error {
	return runAt(ctx, cfg, cs, t, "")
}

// runAt is run with the health-check NodePorts on host ("": every address).
func runAt(ctx context.Context, cfg Config, cs kubernetes.Interface, t Target, host string) error {
	return runWith(ctx, cfg, cs, nil, t, host)
}

// runWith is runAt with a dynamic client for the ClusterNetworkPolicies
// (nil: none are watched).
func runWith(ctx context.Context, cfg Config, cs kubernetes.Interface, dyn dynamic.Interface, t Target, host string) error {
	// slim: the caches keep what this package reads (memory; no-op
	// updates recognised by unchanged).
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(slim))
	c := &controller{cfg: cfg, cs: cs, t: t, kick: make(chan struct{}, 1), pkick: make(chan struct{}, 1), health: healthServers{log: cfg.Log, host: host},
		nodes:      f.Core().V1().Nodes(),
		services:   f.Core().V1().Services(),
		slices:     f.Discovery().V1().EndpointSlices(),
		pods:       f.Core().V1().Pods(),
		namespaces: f.Core().V1().Namespaces(),
		policies:   f.Networking().V1().NetworkPolicies(),
		dirty:      dirty{nodes: true, allServices: true, policies: true, services: map[string]bool{}},
		wgKey:      cfg.WGPublicKey}
	if cfg.WGKeys != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case k := <-cfg.WGKeys:
					c.mark(func(d *dirty) { c.wgKey, d.nodes = k, true })
				}
			}
		}()
	}
	if err := c.slices.Informer().AddIndexers(cache.Indexers{sliceIndex: func(obj any) ([]string, error) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok && ServiceKey(s) != "" {
			return []string{ServiceKey(s)}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("kubernetes informer: %w", err)
	}
	handlers := map[cache.SharedIndexInformer]func(obj any){
		c.nodes.Informer(): func(obj any) {
			// This node's addresses are in its policy rules.
			self := false
			if n, ok := obj.(*corev1.Node); ok && n.Name == cfg.NodeName {
				self = true
			}
			c.mark(func(d *dirty) { d.nodes, d.policies = true, d.policies || self })
		},
		c.services.Informer(): func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.mark(func(d *dirty) { d.services[key] = true })
			}
		},
		c.slices.Informer(): func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok && ServiceKey(s) != "" {
				c.mark(func(d *dirty) { d.services[ServiceKey(s)] = true })
			}
		},
		c.pods.Informer():       func(any) { c.mark(func(d *dirty) { d.policies = true }) },
		c.namespaces.Informer(): func(any) { c.mark(func(d *dirty) { d.policies = true }) },
		c.policies.Informer():   func(any) { c.mark(func(d *dirty) { d.policies = true }) },
	}
	for inf, fn := range handlers {
		h := cache.ResourceEventHandlerFuncs{
			AddFunc: fn,
			UpdateFunc: func(old, new any) {
				if !unchanged(old, new) {
					fn(old)
					fn(new)
				}
			},
			DeleteFunc: fn,
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("kubernetes informer: %w", err)
		}
	}
	cfg.Pods.set(c.pods.Lister())
	f.Start(ctx.Done())
	start := time.Now()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("kubernetes: %v cache did not sync: %w", typ, context.Cause(ctx))
		}
	}
	cfg.Log.Info("kubernetes: caches synced", "took", time.Since(start).Round(time.Millisecond))
	if dyn != nil {
		c.cnp = &cnpWatch{dyn: dyn, disc: cs.Discovery(), log: cfg.Log, mark: func() { c.mark(func(d *dirty) { d.policies = true }) }}
		c.cnp.start(ctx)
	}
	err := c.sync()
	perr := c.policySync()
	go c.policyLoop(ctx, perr != nil)
	go func() {
		defer f.Shutdown()
		defer c.health.close()
		c.loop(ctx, err != nil)
	}()
	return errors.Join(err, perr)
}

// Resource is an API resource Kubernetes mode reads.
type Resource struct{ Group, Resource string }

// Watched is what Run watches (list and watch; deploy/kubernetes/rbac.yaml
// must allow exactly these, deploy's test checks it).
var Watched = []Resource{{"", "nodes"}, {"", "services"}, {"", "pods"}, {"", "namespaces"},
	{"discovery.k8s.io", "endpointslices"}, {"networking.k8s.io", "networkpolicies"},
	{CNPResource.Group, CNPResource.Resource}}

// Written is what Run writes (patch): the status of ClusterNetworkPolicies
// (CNPConditionType) and, with encryption, this node's Node (its
// AnnotationWGPublicKey), nothing else.
var Written = []Resource{{CNPResource.Group, CNPResource.Resource + "/status"}, {"", "nodes"}}

// sliceIndex indexes EndpointSlices by their Service's namespace/name.
const sliceIndex = "service"

type controller struct {
	cfg        Config
	cs         kubernetes.Interface
	t          Target
	kick       chan struct{} // the nodes and Services changed (loop)
	pkick      chan struct{} // the policies' inputs changed (policyLoop)
	nodes      coreinformers.NodeInformer
	services   coreinformers.ServiceInformer
	slices     discoveryinformers.EndpointSliceInformer
	pods       coreinformers.PodInformer
	namespaces coreinformers.NamespaceInformer
	policies   networkinginformers.NetworkPolicyInformer
	cnp        *cnpWatch // nil: ClusterNetworkPolicies are not watched
	wgKey      string    // this node's WireGuard public key to publish (c.mu)

	mu    sync.Mutex
	dirty dirty // what changed since the last sync

	// Owned by the sync (one at a time): what the services are now.
	self     []netip.Addr               // this node's InternalIPs, as last synced
	byKey    map[string][]model.Service // Service namespace/name -> its xlane services
	vipOwner map[string]string          // VIP/PROTO (Service.Key) -> the Service that has it
	contest  map[string]bool            // Services in a VIP conflict (the winner and the others)
	checks   map[string]HealthCheck     // Service namespace/name -> its health-check NodePort
	health   healthServers
}

// dirty is what a sync must redo.
type dirty struct {
	nodes       bool
	allServices bool            // a full translation (the node's addresses changed, a failed sync)
	services    map[string]bool // Services (namespace/name) whose objects or slices changed
	policies    bool
}

// mark records a change and wakes the loop that redoes it: loop for the
// nodes and Services, policyLoop for the policies (a pod's start or stop
// alone wakes only the latter).
func (c *controller) mark(f func(*dirty)) {
	c.mu.Lock()
	f(&c.dirty)
	d := c.dirty
	c.mu.Unlock()
	if d.nodes || d.allServices || len(d.services) > 0 {
		wake(c.kick)
	}
	if d.policies {
		wake(c.pkick)
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// take returns what changed of the nodes and Services and starts a new
// record of them (the policies' flag is policyLoop's: takePolicies).
func (c *controller) take() dirty {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dirty
	c.dirty = dirty{services: map[string]bool{}, policies: d.policies}
	d.policies = false
	return d
}

// takePolicies says whether the policies' inputs changed since the last
// call.
func (c *controller) takePolicies() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.dirty.policies
	c.dirty.policies = false
	return p
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

// sync programs what changed: the nodes, the Services that changed (all
// of them when this node's addresses changed, at the first sync and
// after a failure). What fails is marked again for the retry. The
// NetworkPolicies are policyLoop's: a translation of every pod and
// policy, which under pod churn runs back to back, must not hold up a
// Service's change (bench/scale, issue 32).
func (c *controller) sync() error {
	d := c.take()
	var errs []error
	nodes, err := c.nodes.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	var self []netip.Addr
	var recs []model.Node
	for _, n := range nodes {
		if n.Name == c.cfg.NodeName {
			self = NodeAddrs(n)
			if err := c.publishKey(n); err != nil {
				errs = append(errs, err)
				c.mark(func(d *dirty) { d.nodes = true })
			}
		}
		if rec, ok := NodeRecord(n); ok {
			recs = append(recs, rec)
		}
	}
	if d.nodes && c.cfg.Nodes {
		if err := c.t.SyncNodes(recs); err != nil {
			errs = append(errs, fmt.Errorf("sync nodes: %w", err))
			c.mark(func(d *dirty) { d.nodes = true })
		}
	}
	if !slices.Equal(self, c.self) {
		d.allServices = true // NodePorts (the policies: this Node's handler)
	}
	if d.allServices || len(d.services) > 0 {
		if err := c.syncServices(d, self); err != nil {
			errs = append(errs, err)
			c.mark(func(d *dirty) { d.allServices = true })
		}
		want := map[int32]HealthCheck{}
		for _, hc := range c.checks {
			want[hc.Port] = hc
		}
		if err := c.health.sync(want); err != nil {
			c.cfg.Log.Error("kubernetes: health-check NodePorts", "err", err)
		}
	}
	return errors.Join(errs...)
}

// syncServices applies the Services that changed: only those (the
// translation of each, and an apply of what differs) unless a full sync
// is due or one of them is in a VIP conflict, then all of them.
func (c *controller) syncServices(d dirty, self []netip.Addr) error {
	start := time.Now()
	if !d.allServices && c.byKey != nil {
		req, ok := c.incremental(d.services, self)
		if ok {
			if len(req.Services) == 0 && len(req.Delete) == 0 {
				return nil
			}
			res, err := c.t.ApplyServices(req)
			if err != nil {
				return fmt.Errorf("apply services: %w", err)
			}
			c.cfg.Log.Info("kubernetes sync", "changed_k8s_services", len(d.services), "created", res.Created,
				"updated", res.Updated, "deleted", res.Deleted, "took", time.Since(start).Round(time.Microsecond))
			return nil
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
	want, skipped, byKey := translateAll(Input{Services: svcs, Slices: slices, NodeName: c.cfg.NodeName, NodeAddrs: self})
	contest := map[string]bool{}
	for _, s := range skipped {
		c.cfg.Log.Warn("kubernetes: vip left out", "service", s.Service, "vip", s.VIP, "reason", s.Reason)
		contest[s.Service] = true
		contest[s.Owner] = true
	}
	translated := time.Since(start)
	res, err := c.t.ApplyServices(model.ServiceApply{Services: want, Prune: true, PrunePrefix: NamePrefix})
	if err != nil {
		c.byKey = nil
		return fmt.Errorf("apply services: %w", err)
	}
	c.self, c.byKey, c.contest = self, byKey, contest
	c.checks = map[string]HealthCheck{}
	for _, svc := range svcs {
		key := svc.Namespace + "/" + svc.Name
		if hc, ok := HealthCheckOf(svc, c.slicesOf(key), c.cfg.NodeName); ok {
			c.checks[key] = hc
		}
	}
	c.vipOwner = map[string]string{}
	for k, scs := range byKey {
		for _, sc := range scs {
			c.vipOwner[sc.Key()] = k
		}
	}
	c.cfg.Log.Info("kubernetes sync", "k8s_services", len(svcs), "vips", len(want),
		"created", res.Created, "updated", res.Updated, "deleted", res.Deleted,
		"translate", translated.Round(time.Microsecond), "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// incremental translates the Services keys alone and returns the apply
// of what changed. ok is false when that cannot be decided alone: a VIP
// another Service has, a Service in a conflict.
func (c *controller) incremental(keys map[string]bool, self []netip.Addr) (req model.ServiceApply, ok bool) {
	next := map[string][]model.Service{}
	claimed := map[string]bool{} // VIPs of the Services translated here
	for key := range keys {
		if c.contest[key] {
			return req, false
		}
		ns, name, _ := strings.Cut(key, "/")
		svc, err := c.services.Lister().Services(ns).Get(name)
		if err != nil {
			next[key] = nil // deleted
			delete(c.checks, key)
			continue
		}
		eps := c.slicesOf(key)
		if hc, ok := HealthCheckOf(svc, eps, c.cfg.NodeName); ok {
			c.checks[key] = hc
		} else {
			delete(c.checks, key)
		}
		scs := translateService(svc, eps, c.cfg.NodeName, self)
		for _, sc := range scs {
			if model.VIPAddrProblem(sc.VIP.Addr()) != "" {
				return req, false // the full sync leaves it out and says why
			}
			if owner, taken := c.vipOwner[sc.Key()]; taken && owner != key || claimed[sc.Key()] {
				return req, false
			}
			claimed[sc.Key()] = true
		}
		next[key] = scs
	}
	for key, scs := range next {
		old := map[string]model.Service{}
		for _, sc := range c.byKey[key] {
			old[sc.Name] = sc
		}
		for _, sc := range scs {
			if o, had := old[sc.Name]; !had || o.Key() != sc.Key() || o.Affinity != sc.Affinity || o.AffinityTimeout != sc.AffinityTimeout || !slices.Equal(o.Backends, sc.Backends) {
				if had && o.Key() != sc.Key() {
					return req, false // a VIP changed: the daemon refuses to move it
				}
				req.Services = append(req.Services, sc)
			}
			delete(old, sc.Name)
		}
		for name := range old {
			req.Delete = append(req.Delete, name)
		}
	}
	// Recorded now; a failed apply clears byKey, so that the retry is a
	// full sync.
	for key, scs := range next {
		for _, sc := range c.byKey[key] {
			delete(c.vipOwner, sc.Key())
		}
		if len(scs) == 0 {
			delete(c.byKey, key)
			continue
		}
		c.byKey[key] = scs
		for _, sc := range scs {
			c.vipOwner[sc.Key()] = key
		}
	}
	return req, true
}

// slicesOf returns the EndpointSlices of a Service (namespace/name).
func (c *controller) slicesOf(key string) []*discoveryv1.EndpointSlice {
	objs, _ := c.slices.Informer().GetIndexer().ByIndex(sliceIndex, key)
	eps := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		eps = append(eps, o.(*discoveryv1.EndpointSlice))
	}
	return eps
}

// syncPolicies applies the firewall rules of the NetworkPolicies.
func (c *controller) syncPolicies(self []netip.Addr) error {
	start := time.Now()
	pols, err := c.policies.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	pods, err := c.pods.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	nss, err := c.namespaces.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	nodes, err := c.nodes.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	cnps, undecodable := c.cnp.list()
	rules, sts := TranslateAllPolicies(PolicyInput{Policies: pols, ClusterPolicies: cnps, Pods: pods, Namespaces: nss, Nodes: nodes,
		NodeName: c.cfg.NodeName, NodeAddrs: self})
	if err := c.t.ApplyFirewallOwned(PolicyPrefix, rules); err != nil {
		// Nothing of the set is applied: every policy says so.
		for i := range sts {
			if sts[i].Accepted {
				sts[i] = CNPStatus{Name: sts[i].Name, Message: "this node's firewall refused the policies' rules (none applied): " + err.Error()}
			}
		}
		c.cnp.report(append(undecodable, sts...))
		return err
	}
	c.cnp.report(append(undecodable, sts...))
	if len(pols) > 0 || len(cnps) > 0 {
		c.cfg.Log.Info("kubernetes policy sync", "policies", len(pols), "cluster_policies", len(cnps), "pods", len(pods), "rules", len(rules),
			"took", time.Since(start).Round(time.Microsecond))
	}
	return nil
}

// publishKey puts this node's WireGuard public key on its Node (a merge
// patch of the one annotation), when it is not there already.
func (c *controller) publishKey(n *corev1.Node) error {
	c.mu.Lock()
	key := c.wgKey
	c.mu.Unlock()
	if key == "" || n.Annotations[AnnotationWGPublicKey] == key {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationWGPublicKey: key}}})
	if err != nil {
		return err
	}
	if _, err := c.cs.CoreV1().Nodes().Patch(context.Background(), n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("publish the WireGuard public key on Node %s: %w", n.Name, err)
	}
	c.cfg.Log.Info("WireGuard public key published", "node", n.Name, "annotation", AnnotationWGPublicKey)
	return nil
}
