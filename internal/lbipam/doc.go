// Package lbipam is LoadBalancer address management: the pools
// (`xlane lb-pool create NAME --cidr ...`, bucket lb_pools of the store)
// and, in Kubernetes mode, the allocator that hands their addresses to
// Services of type LoadBalancer (status.loadBalancer.ingress).
//
// A pool has two readers: the allocator, and the BGP speaker
// (internal/bgp), which announces every service VIP inside a pool as a
// host route. Pools never overlap (Create refuses it, naming both).
package lbipam
