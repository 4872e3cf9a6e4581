package model

import "net/netip"

// Pod is what a flow's reader is told about a Kubernetes pod: the
// Kubernetes watch (internal/k8s) lists them, the Hubble server
// (internal/hubble) names flows' addresses with them.
type Pod struct {
	Name      string
	Namespace string
	Node      string // spec.nodeName
	Labels    map[string]string
	IPs       []netip.Addr // status.podIPs
	// Workload is the pod's controller (owner reference) as kind/name:
	// "ReplicaSet/web-5d8f", "" for a bare pod.
	WorkloadKind, WorkloadName string
}
