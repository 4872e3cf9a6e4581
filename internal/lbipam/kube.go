package lbipam

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// ConfigMap is the name of the ConfigMap that holds the cluster's pools
// in Kubernetes mode (key PoolsKey: a JSON list of pools, as `xlane
// lb-pool create` takes them), in KubeConfig.Namespace.
const (
	ConfigMap = "xlane-lb-pools"
	PoolsKey  = "pools.json"
	// Lease is the leader election's Lease: one xlaned of the cluster
	// allocates at a time.
	Lease = "xlane-lb-ipam"
)

// Writes is the one cluster-wide write of the allocator
// (deploy/kubernetes/rbac.yaml's ClusterRole; its ConfigMap and Lease
// are in a Role of the namespace).
var Writes = struct {
	Group, Resource string
	Verbs           []string
}{"", "services/status", []string{"update", "patch"}}

// KubeConfig says where the allocator's objects are and who it is.
type KubeConfig struct {
	// Namespace holds ConfigMap and Lease ("": kube-system).
	Namespace string
	// Identity is this node's name in the leader election.
	Identity string
	Log      *slog.Logger
	// LeaseDuration is the leader's lease (0: 15 s); a new leader takes
	// over at most this long after the old one stops renewing.
	LeaseDuration time.Duration
}

// RunKubernetes runs Kubernetes mode's side of the pools until ctx ends:
// on every node, the pools of ConfigMap mirrored into the store (what the
// BGP speaker announces from), and on the elected leader, the allocator
// writing status.loadBalancer.ingress and the ConditionType condition of
// every managed Service (Assign). A ConfigMap with a bad pool is refused
// whole, logged naming the field, and the pools stay as they were.
func (p *Pools) RunKubernetes(ctx context.Context, cs kubernetes.Interface, cfg KubeConfig) error {
	if cfg.Namespace == "" {
		cfg.Namespace = "kube-system"
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	log := cfg.Log.With("part", "lb-ipam")
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	cmf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConfigMap).String()
		}))
	cmInf := cmf.Core().V1().ConfigMaps().Informer()
	onCM := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			if err := p.mirror(cm); err != nil {
				log.Error("lb pools from the ConfigMap refused", "configmap", cfg.Namespace+"/"+ConfigMap, "err", err)
			}
			poke()
		}
	}
	cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onCM, UpdateFunc: func(_, o any) { onCM(o) }})
	cmf.Start(ctx.Done())

	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: Lease, Namespace: cfg.Namespace},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.LeaseDuration * 2 / 3, RetryPeriod: cfg.LeaseDuration / 7,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("allocating LoadBalancer addresses (elected)", "identity", cfg.Identity)
				p.allocate(ctx, cs, log, kick, poke)
			},
			OnStoppedLeading: func() { log.Info("no longer allocating LoadBalancer addresses", "identity", cfg.Identity) },
		},
	})
	if err != nil {
		return fmt.Errorf("lb ipam leader election: %w", err)
	}
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	return nil
}

// mirror replaces the store's pools with the ConfigMap's, all or none.
func (p *Pools) mirror(cm *corev1.ConfigMap) error {
	var pools []model.LBPool
	raw, ok := cm.Data[PoolsKey]
	if !ok {
		return model.Fieldf(PoolsKey, "missing from the ConfigMap's data")
	}
	if err := json.Unmarshal([]byte(raw), &pools); err != nil {
		return model.Fieldf(PoolsKey, "%s", err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for i := range pools {
		if err := checkPool(&pools[i]); err != nil {
			return model.IndexedField("pools", i, err)
		}
		if err := CheckOverlap(pools[i], pools[:i]); err != nil {
			return model.IndexedField("pools", i, err)
		}
		pools[i].Created = now
	}
	return p.st.Update(func(tx *store.Tx) error {
		old, err := tx.LBPools()
		if err != nil {
			return err
		}
		for _, o := range old {
			if !slices.ContainsFunc(pools, func(n model.LBPool) bool { return n.Name == o.Name }) {
				if err := tx.DeleteLBPool(o.Name); err != nil {
					return err
				}
			}
		}
		for i := range pools {
			if o := slices.IndexFunc(old, func(o model.LBPool) bool { return o.Name == pools[i].Name }); o >= 0 {
				pools[i].Created = old[o].Created
			}
			if err := tx.PutLBPool(&pools[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// allocate is the leader's loop: a pass after every Service or pool
// change, and every 30 s.
func (p *Pools) allocate(ctx context.Context, cs kubernetes.Interface, log *slog.Logger, kick chan struct{}, poke func()) {
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().Services()
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() },
	})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return
	}
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	poke()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
		svcs, err := inf.Lister().List(labels.Everything())
		if err != nil {
			continue
		}
		pools, err := p.all()
		if err != nil {
			log.Error("lb ipam: read pools", "err", err)
			continue
		}
		byKey := map[string]*corev1.Service{}
		for _, s := range svcs {
			byKey[key(s)] = s
		}
		retry := false
		for _, r := range Assign(pools, svcs) {
			if err := writeStatus(ctx, cs, byKey[r.Key], r); err != nil {
				log.Warn("lb ipam: write service status", "service", r.Key, "err", err)
				retry = true
			}
		}
		if retry {
			time.AfterFunc(time.Second, poke)
		}
	}
}

func (p *Pools) all() ([]model.LBPool, error) {
	var out []model.LBPool
	err := p.st.View(func(tx *store.Tx) error {
		var err error
		out, err = tx.LBPools()
		return err
	})
	return out, err
}

// writeStatus makes svc's status say r, when it does not already.
func writeStatus(ctx context.Context, cs kubernetes.Interface, svc *corev1.Service, r Result) error {
	want := svc.Status.DeepCopy()
	var ing []corev1.LoadBalancerIngress
	for _, a := range r.IPs {
		ing = append(ing, corev1.LoadBalancerIngress{IP: a.String(), IPMode: ptr(corev1.LoadBalancerIPModeVIP)})
	}
	want.LoadBalancer.Ingress = ing
	cond := metav1.Condition{Type: ConditionType, Status: metav1.ConditionTrue, Reason: "Allocated",
		Message: fmt.Sprint(r.IPs), ObservedGeneration: svc.Generation}
	if r.Reason != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, r.Reason, r.Message
	}
	meta.SetStatusCondition(&want.Conditions, cond)
	if sameIngress(svc.Status.LoadBalancer.Ingress, want.LoadBalancer.Ingress) && sameCondition(svc.Status.Conditions, cond) {
		return nil
	}
	c := svc.DeepCopy()
	c.Status = *want
	_, err := cs.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	return err
}

func sameIngress(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool { return x.IP == y.IP })
}

func sameCondition(cs []metav1.Condition, c metav1.Condition) bool {
	o := meta.FindStatusCondition(cs, c.Type)
	return o != nil && o.Status == c.Status && o.Reason == c.Reason && o.Message == c.Message
}

func ptr[T any](v T) *T { return &v }

// IngressIPs is what a Service's status says, for tests and listings.
func IngressIPs(s *corev1.Service) []netip.Addr { return statusIPs(s) }

// checkPool validates a pool of the ConfigMap as Create does one.
func checkPool(p *model.LBPool) error {
	if err := nameOK(p.Name); err != nil {
		return err
	}
	return p.Validate()
}
