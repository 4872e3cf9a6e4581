package main

// When the bench's own informers saw a change come out of the API server:
// an address made ready or unready in an EndpointSlice (by the controller
// manager), a Service's port added or removed, a Node added or deleted.
// A change's delay splits there: before it the control plane's (the API
// server, kwok playing the pod, the controller manager's slice), after it
// xlaned's (its watch, its sync, the maps). The bench's watch is one more
// client of the same API server, so that point is where xlaned's own watch
// gets the change too, give or take the two clients' scheduling.

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// seenLog is the last time each change key was seen (seenKey).
type seenLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

// Change keys: an address ready or not in a slice; a Service's port
// present or not; a Node present or not.
func readyKey(ip string, ready bool) string { return fmt.Sprintf("ep %s %v", ip, ready) }
func portKey(ns, name string, port int32, present bool) string {
	return fmt.Sprintf("port %s/%s %d %v", ns, name, port, present)
}
func nodeKey(name string, present bool) string { return fmt.Sprintf("node %s %v", name, present) }

func (l *seenLog) mark(now time.Time, keys ...string) {
	if len(keys) == 0 {
		return
	}
	l.mu.Lock()
	for _, k := range keys {
		l.at[k] = now
	}
	l.mu.Unlock()
}

// since is when key was last seen, if at or after t0.
func (l *seenLog) since(key string, t0 time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.at[key]
	return t, ok && !t.Before(t0)
}

// readyAddrs is a slice's endpoint addresses with their readiness.
func readyAddrs(obj any) map[string]bool {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	out := map[string]bool{}
	if !ok {
		return out
	}
	for _, e := range s.Endpoints {
		for _, a := range e.Addresses {
			out[a] = out[a] || ptr.Deref(e.Conditions.Ready, true)
		}
	}
	return out
}

// sliceChanges is the keys of what an update of a slice changed (old or
// new nil: an add or a delete).
func sliceChanges(old, new any) []string {
	o, n := readyAddrs(old), readyAddrs(new)
	var keys []string
	for a, r := range n {
		if r && !o[a] {
			keys = append(keys, readyKey(a, true))
		}
	}
	for a, r := range o {
		if r && !n[a] {
			keys = append(keys, readyKey(a, false))
		}
	}
	return keys
}

func svcPorts(obj any) (ns, name string, ports map[int32]bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*corev1.Service)
	ports = map[int32]bool{}
	if !ok {
		return "", "", ports
	}
	for _, p := range s.Spec.Ports {
		ports[p.Port] = true
	}
	return s.Namespace, s.Name, ports
}

func serviceChanges(old, new any) []string {
	ns, name, o := svcPorts(old)
	ns2, name2, n := svcPorts(new)
	if name == "" {
		ns, name = ns2, name2
	}
	var keys []string
	for p := range n {
		if !o[p] {
			keys = append(keys, portKey(ns, name, p, true))
		}
	}
	for p := range o {
		if !n[p] {
			keys = append(keys, portKey(ns, name, p, false))
		}
	}
	return keys
}

func nodeOf(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		return n.Name
	}
	return ""
}

// watchSeen hooks the log to the view's informers.
func (v *view) watchSeen() error {
	l := v.seen
	on := func(inf cache.SharedIndexInformer, changes func(old, new any) []string) error {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { l.mark(time.Now(), changes(nil, obj)...) },
			UpdateFunc: func(old, new any) { l.mark(time.Now(), changes(old, new)...) },
			DeleteFunc: func(obj any) { l.mark(time.Now(), changes(obj, nil)...) },
		})
		return err
	}
	if err := on(v.slices, sliceChanges); err != nil {
		return err
	}
	if err := on(v.svcs, serviceChanges); err != nil {
		return err
	}
	return on(v.nodes, func(old, new any) []string {
		switch {
		case old == nil:
			return []string{nodeKey(nodeOf(new), true)}
		case new == nil:
			return []string{nodeKey(nodeOf(old), false)}
		}
		return nil
	})
}
