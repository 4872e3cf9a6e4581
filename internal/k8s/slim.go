package k8s

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slim is the informers' transform: it drops, before an object enters
// the cache, what this package never reads, so that a cluster's objects
// cost less memory (bench/scale: issue 32) and an update that changed
// only that is recognised as nothing (unchanged):
//   - every object's managedFields (server-side apply's bookkeeping, often
//     the larger part of a small object);
//   - a Pod's spec but its node, host network and containers' ports
//     (named ports of policies), its status but its phase and addresses,
//     its annotations (kwok's and the kubelet's condition and container
//     status writes then change nothing kept);
//   - a Node's images, conditions, capacity, daemon endpoints and node
//     info (a kubelet's heartbeat rewrites conditions every few seconds).
func slim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		spec := corev1.PodSpec{NodeName: o.Spec.NodeName, HostNetwork: o.Spec.HostNetwork}
		for _, c := range o.Spec.Containers {
			if len(c.Ports) > 0 {
				spec.Containers = append(spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
			}
		}
		o.Spec = spec
		o.Status = corev1.PodStatus{Phase: o.Status.Phase, PodIP: o.Status.PodIP, PodIPs: o.Status.PodIPs}
		o.Annotations = nil
	case *corev1.Node:
		o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses}
	}
	return obj, nil
}

// unchanged reports whether an update changed nothing the controller
// reads: the same resourceVersion (a relist after the API server lost the
// watch's history hands every object over again) or, for Pods and Nodes,
// objects equal but for it once slimmed (a heartbeat, a readiness write).
// Such updates mark nothing for the next sync.
func unchanged(old, new any) bool {
	o, ok := old.(metav1.Object)
	n, ok2 := new.(metav1.Object)
	if !ok || !ok2 {
		return false
	}
	if o.GetResourceVersion() != "" && o.GetResourceVersion() == n.GetResourceVersion() {
		return true
	}
	switch op := old.(type) {
	case *corev1.Pod:
		np, ok := new.(*corev1.Pod)
		if !ok {
			return false
		}
		a, b := *op, *np
		a.ResourceVersion, b.ResourceVersion = "", ""
		return reflect.DeepEqual(&a, &b)
	case *corev1.Node:
		nn, ok := new.(*corev1.Node)
		if !ok {
			return false
		}
		a, b := *op, *nn
		a.ResourceVersion, b.ResourceVersion = "", ""
		return reflect.DeepEqual(&a, &b)
	}
	return false
}
