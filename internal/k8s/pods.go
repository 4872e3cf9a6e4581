package k8s

import (
	"net/netip"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/xlane-dev/xlane/internal/model"
)

// PodCache hands the watch's pods to another part of xlaned (the Hubble
// server names flows with them): Run fills it once its informers run
// (Config.Pods); until then it lists none.
type PodCache struct {
	lister atomic.Pointer[corelisters.PodLister]
}

func (c *PodCache) set(l corelisters.PodLister) {
	if c != nil {
		c.lister.Store(&l)
	}
}

// List is every pod with an address, from the informer's cache.
func (c *PodCache) List() []model.Pod {
	l := c.lister.Load()
	if l == nil {
		return nil
	}
	pods, err := (*l).List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]model.Pod, 0, len(pods))
	for _, p := range pods {
		mp := model.Pod{Name: p.Name, Namespace: p.Namespace, Node: p.Spec.NodeName, Labels: p.Labels}
		if p.Spec.HostNetwork {
			continue // the node's addresses, not the pod's
		}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				mp.IPs = append(mp.IPs, a)
			}
		}
		if len(mp.IPs) == 0 {
			continue
		}
		for _, o := range p.OwnerReferences {
			if o.Controller != nil && *o.Controller {
				mp.WorkloadKind, mp.WorkloadName = o.Kind, o.Name
			}
		}
		out = append(out, mp)
	}
	return out
}
