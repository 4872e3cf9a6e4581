package k8s

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlane-dev/xlane/internal/model"
)

// NamePrefix starts the name of every xlane service this package
// programs; an apply prunes only names with it.
const NamePrefix = "k8s."

// AnnotationWGPublicKey is the Node annotation where each xlaned with
// --encryption wireguard publishes its node's WireGuard public key, and
// where the others read their peers' (docs/encryption.md).
const AnnotationWGPublicKey = "xlane.dev/wg-public-key"

// NodeRecord reads a Node into a node record: its first InternalIP of
// each family (IPv4 first) as the underlay, spec.podCIDRs (or the older
// spec.podCIDR) as pod CIDRs, its AnnotationWGPublicKey as its WireGuard
// key. ok is false for a Node without an InternalIP or a pod CIDR (not yet
// allocated): it cannot be a peer yet.
func NodeRecord(n *corev1.Node) (rec model.Node, ok bool) {
	rec.Name = n.Name
	rec.WGPublicKey = n.Annotations[AnnotationWGPublicKey]
	var have4, have6 bool
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() && !have4 || ip.Is6() && !have6 {
			have4, have6 = have4 || ip.Is4(), have6 || ip.Is6()
			rec.Underlay = append(rec.Underlay, ip)
		}
	}
	slices.SortStableFunc(rec.Underlay, func(a, b netip.Addr) int { return familyFirst(a) - familyFirst(b) })
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			rec.PodCIDRs = append(rec.PodCIDRs, p.Masked())
		}
	}
	slices.SortStableFunc(rec.PodCIDRs, func(a, b netip.Prefix) int { return familyFirst(a.Addr()) - familyFirst(b.Addr()) })
	return rec, len(rec.Underlay) > 0 && len(rec.PodCIDRs) > 0
}

// familyFirst orders IPv4 (0) before IPv6 (1).
func familyFirst(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// NodeAddrs returns a Node's InternalIPs: where its NodePorts listen.
func NodeAddrs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(out, ip.Unmap()) {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// Input is what a sync translates: the API's objects and this node.
type Input struct {
	Services []*corev1.Service
	Slices   []*discoveryv1.EndpointSlice
	// NodeName is this node (endpoints' nodeName for the Local
	// policies); NodeAddrs its InternalIPs (its NodePorts' addresses).
	NodeName  string
	NodeAddrs []netip.Addr
}

// Skipped is a VIP Translate left out, and why.
type Skipped struct {
	Service string // namespace/name
	VIP     string // VIP/PROTO (model.Service.Key)
	Reason  string
	Owner   string // the Service that has the VIP
}

// endpoint is one backend candidate of a Service port.
type endpoint struct {
	addr        netip.AddrPort
	node        string
	ready       bool
	serving     bool
	terminating bool
}

// Translate computes the xlane services of in, sorted by name: the whole
// set a sync applies. A VIP that two Services claim goes to the older
// (then the first by namespace/name); the other is reported in skipped.
func Translate(in Input) (out []model.Service, skipped []Skipped) {
	out, skipped, _ = translateAll(in)
	return out, skipped
}

// translateAll is Translate, with the xlane services of each Service
// (namespace/name) as the result has them.
func translateAll(in Input) (out []model.Service, skipped []Skipped, byKey map[string][]model.Service) {
	byKey = map[string][]model.Service{}
	byService := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range in.Slices {
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		k := s.Namespace + "/" + name
		byService[k] = append(byService[k], s)
	}
	svcs := slices.Clone(in.Services)
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	vips := map[string]string{} // vip/proto -> service that has it
	for _, svc := range svcs {
		key := svc.Namespace + "/" + svc.Name
		for _, sc := range translateService(svc, byService[key], in.NodeName, in.NodeAddrs) {
			vip := sc.Key()
			if why := model.VIPAddrProblem(sc.VIP.Addr()); why != "" {
				// The daemon refuses it, and with it the whole apply.
				skipped = append(skipped, Skipped{Service: key, VIP: vip, Reason: why})
				continue
			}
			if other, taken := vips[vip]; taken {
				skipped = append(skipped, Skipped{Service: key, VIP: vip, Reason: "also " + other + "'s", Owner: other})
				continue
			}
			vips[vip] = key
			out = append(out, sc)
			byKey[key] = append(byKey[key], sc)
		}
	}
	slices.SortFunc(out, func(a, b model.Service) int { return cmp.Compare(a.Name, b.Name) })
	return out, skipped, byKey
}

// ServiceKey is the namespace/name of the Service an EndpointSlice
// belongs to ("" for none).
func ServiceKey(s *discoveryv1.EndpointSlice) string {
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return ""
	}
	return s.Namespace + "/" + name
}

// translateService returns the xlane services of one Service.
func translateService(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, self string, nodeAddrs []netip.Addr) []model.Service {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil
	}
	clusterIPs := svc.Spec.ClusterIPs
	if len(clusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		clusterIPs = []string{svc.Spec.ClusterIP}
	}
	var external []string // vips of external traffic: externalIPs, LB ingress
	external = append(external, svc.Spec.ExternalIPs...)
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				external = append(external, ing.IP)
			}
		}
	}
	internalLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	externalLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	affinity := svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP
	var affinityTimeout int
	if affinity {
		affinityTimeout = int(corev1.DefaultClientIPServiceAffinitySeconds)
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			affinityTimeout = int(*c.ClientIP.TimeoutSeconds)
		}
	}
	nodePorts := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer

	var out []model.Service
	for _, p := range svc.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		if proto != "tcp" && proto != "udp" {
			continue // SCTP: the datapath balances TCP and UDP
		}
		eps := portEndpoints(eps, p)
		portID := fmt.Sprintf("%s%d", proto, p.Port)
		add := func(kind string, i int, ip netip.Addr, port int32, local bool) {
			out = append(out, model.Service{
				Name:            serviceName(svc.Namespace, svc.Name, portID, fmt.Sprintf("%s%d", kind, i)),
				VIP:             netip.AddrPortFrom(ip, uint16(port)),
				Proto:           proto,
				Backends:        backends(eps, ip.Is4(), local, self),
				Affinity:        affinity,
				AffinityTimeout: affinityTimeout,
			})
		}
		for i, s := range clusterIPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				add("c", i, ip.Unmap(), p.Port, internalLocal)
			}
		}
		for i, s := range external {
			if ip, err := netip.ParseAddr(s); err == nil {
				add("x", i, ip.Unmap(), p.Port, externalLocal)
			}
		}
		if nodePorts && p.NodePort != 0 {
			for i, ip := range nodeAddrs {
				add("n", i, ip, p.NodePort, externalLocal)
			}
		}
	}
	return out
}

// portEndpoints collects the endpoints of one Service port from its
// slices: the slice port of the same name and protocol gives the
// backends' port. An address in two slices counts once (the first).
func portEndpoints(eps []*discoveryv1.EndpointSlice, p corev1.ServicePort) []endpoint {
	var out []endpoint
	seen := map[netip.AddrPort]bool{}
	for _, s := range eps {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		var port int32
		for _, sp := range s.Ports {
			proto := corev1.ProtocolTCP
			if sp.Protocol != nil {
				proto = *sp.Protocol
			}
			if ptrOr(sp.Name, "") == p.Name && proto == cmp.Or(p.Protocol, corev1.ProtocolTCP) && sp.Port != nil {
				port = *sp.Port
				break
			}
		}
		if port <= 0 || port > 65535 {
			continue
		}
		for _, e := range s.Endpoints {
			ready := ptrOr(e.Conditions.Ready, true)
			ep := endpoint{
				node:        ptrOr(e.NodeName, ""),
				ready:       ready,
				serving:     ptrOr(e.Conditions.Serving, ready),
				terminating: ptrOr(e.Conditions.Terminating, false),
			}
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				ep.addr = netip.AddrPortFrom(ip.Unmap(), uint16(port))
				if !seen[ep.addr] {
					seen[ep.addr] = true
					out = append(out, ep)
				}
			}
		}
	}
	return out
}

// backends picks a VIP's backends of one family: ready
// endpoints at weight 1, serving terminating ones drained at weight 0;
// without a ready one, the serving terminating ones at weight 1. local
// keeps only this node's endpoints.
func backends(eps []endpoint, v4, local bool, self string) []model.Backend {
	var cand []endpoint
	anyReady := false
	for _, e := range eps {
		if e.addr.Addr().Is4() != v4 || local && e.node != self {
			continue
		}
		if e.ready && !e.terminating {
			anyReady = true
		} else if !e.serving {
			continue
		}
		cand = append(cand, e)
	}
	slices.SortFunc(cand, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
	out := make([]model.Backend, 0, len(cand))
	for _, e := range cand {
		w := uint32(1)
		if anyReady && (e.terminating || !e.ready) {
			w = 0
		}
		out = append(out, model.Backend{Addr: e.addr, Weight: w})
	}
	return out
}

// serviceName is NamePrefix + namespace.name.port.vip, within the daemon's
// 64 characters: a longer one keeps its head and ends with a hash of the
// whole name.
func serviceName(ns, name, port, vip string) string {
	return model.ClipName(NamePrefix + ns + "." + name + "." + port + "." + vip)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
