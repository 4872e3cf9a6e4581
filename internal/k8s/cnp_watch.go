package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// CNPConditionType is the condition xlaned keeps in a
// ClusterNetworkPolicy's status: True when its rules are programmed,
// False with the field that keeps it out; the message also carries the
// warnings of an accepted policy (what it asks that xlane does not
// enforce, shared priorities). Every node computes the same one (it does
// not depend on the node's pods); a node writes it only when it differs.
const CNPConditionType = "xlane.dev/Accepted"

// cnpRecheck is how often xlaned looks for the ClusterNetworkPolicy CRD
// while the API server does not serve it.
var cnpRecheck = 10 * time.Second

// cnpWatch is the ClusterNetworkPolicy side of the controller: it waits
// for the CRD, then watches the policies with the dynamic client and
// writes their status conditions in the background.
type cnpWatch struct {
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	log  *slog.Logger
	mark func() // the policies must be synced again

	mu      sync.Mutex
	inf     cache.SharedIndexInformer // nil until the CRD is served
	pending map[string]CNPStatus      // statuses to write (latest wins)
	written map[string]CNPStatus      // as last written or seen
	kick    chan struct{}
}

// start runs the status writer and the informer: at once when the API
// server serves the CRD (the first sync has the policies), else once it
// does (looked for every cnpRecheck), then the policies are synced again.
func (w *cnpWatch) start(ctx context.Context) {
	w.kick = make(chan struct{}, 1)
	w.pending, w.written = map[string]CNPStatus{}, map[string]CNPStatus{}
	go w.writer(ctx)
	if w.served() {
		w.watch(ctx)
		return
	}
	w.log.Info("kubernetes: clusternetworkpolicies not served (CRD not installed): looking again every " + cnpRecheck.String())
	go func() {
		for !w.served() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(cnpRecheck):
			}
		}
		w.watch(ctx)
		w.mark()
	}()
}

// watch starts the informer and waits for its cache.
func (w *cnpWatch) watch(ctx context.Context) {
	inf := dynamicinformer.NewFilteredDynamicInformer(w.dyn, CNPResource, "", 0, cache.Indexers{}, nil).Informer()
	h := func(any) { w.mark() }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, n any) { h(n) }, DeleteFunc: h}); err != nil {
		w.log.Error("kubernetes: clusternetworkpolicies informer", "err", err)
		return
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	w.mu.Lock()
	w.inf = inf
	w.mu.Unlock()
	w.log.Info("kubernetes: watching clusternetworkpolicies", "resource", CNPResource.String())
}

// served reports whether the API server serves CNPResource.
func (w *cnpWatch) served() bool {
	l, err := w.disc.ServerResourcesForGroupVersion(CNPResource.GroupVersion().String())
	if err != nil || l == nil {
		return false
	}
	return slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == CNPResource.Resource })
}

// list returns the policies (none before the CRD is served). An object
// that does not decode is reported with the field of the error.
func (w *cnpWatch) list() ([]*ClusterNetworkPolicy, []CNPStatus) {
	if w == nil {
		return nil, nil
	}
	w.mu.Lock()
	inf := w.inf
	w.mu.Unlock()
	if inf == nil {
		return nil, nil
	}
	var out []*ClusterNetworkPolicy
	var bad []CNPStatus
	for _, o := range inf.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		p, err := decodeCNP(u.Object)
		if err != nil {
			bad = append(bad, CNPStatus{Name: u.GetName(), Message: err.Error()})
			continue
		}
		out = append(out, p)
	}
	return out, bad
}

// decodeCNP converts an object of the dynamic client.
func decodeCNP(obj map[string]any) (*ClusterNetworkPolicy, error) {
	var p ClusterNetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return &p, nil
}

// report logs the statuses that changed and queues their conditions for
// the writer.
func (w *cnpWatch) report(sts []CNPStatus) {
	if w == nil || w.kick == nil {
		return
	}
	w.mu.Lock()
	for _, s := range sts {
		if w.written[s.Name] == s {
			continue
		}
		if s.Accepted {
			w.log.Info("kubernetes: clusternetworkpolicy accepted", "name", s.Name, "warnings", s.Message)
		} else {
			w.log.Warn("kubernetes: clusternetworkpolicy refused", "name", s.Name, "err", s.Message)
		}
		w.pending[s.Name] = s
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// writer patches the pending conditions, one policy at a time, so that a
// sync never waits on the API server for them.
func (w *cnpWatch) writer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		w.mu.Lock()
		todo := w.pending
		w.pending = map[string]CNPStatus{}
		w.mu.Unlock()
		for _, s := range todo {
			if err := w.writeStatus(ctx, s); err != nil {
				w.log.Warn("kubernetes: clusternetworkpolicy status", "name", s.Name, "err", err)
				continue
			}
			w.mu.Lock()
			w.written[s.Name] = s
			w.mu.Unlock()
		}
	}
}

// writeStatus sets CNPConditionType in the policy's status, unless it
// already says the same (another node wrote it).
func (w *cnpWatch) writeStatus(ctx context.Context, s CNPStatus) error {
	res := w.dyn.Resource(CNPResource)
	u, err := res.Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cond := metav1.Condition{Type: CNPConditionType, Status: metav1.ConditionTrue, Reason: "Programmed",
		Message: s.Message, ObservedGeneration: u.GetGeneration()}
	if !s.Accepted {
		cond.Status, cond.Reason = metav1.ConditionFalse, "InvalidField"
	}
	if cond.Message == "" {
		cond.Message = "the rules are programmed"
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == cond.Type && m["status"] == string(cond.Status) && m["message"] == cond.Message &&
			fmt.Sprint(m["observedGeneration"]) == fmt.Sprint(cond.ObservedGeneration) {
			return nil
		}
	}
	cond.LastTransitionTime = metav1.Now()
	// A JSON merge patch would replace the whole list: keep the other
	// conditions (other implementations', if any).
	var keep []any
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] != cond.Type {
			keep = append(keep, c)
		}
	}
	cm, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cond)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": append(keep, cm)}})
	if err != nil {
		return err
	}
	_, err = res.Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
