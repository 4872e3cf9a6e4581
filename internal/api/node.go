package api

import (
	"net/netip"

	"github.com/xlane-dev/xlane/internal/model"
)

// Node reads a node add request (text addresses and prefixes, as the API,
// the CLI and the --nodes file carry them) into a node record to add: the
// only place that reads them. Errors name the field; what is not about
// the text (families, unicast, overlaps, the cluster CIDR) the cluster
// checks (internal/cluster).
func (r NodeAdd) Node() (model.Node, error) {
	// The WireGuard key stays text (base64, as every tool shows it); the
	// cluster checks it with the other encryption rules.
	n := model.Node{Name: r.Name, MTU: r.MTU, WGPublicKey: r.WGPublicKey}
	for _, s := range r.Underlay {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return n, model.Fieldf("underlay", "%q: not an IP address", s)
		}
		n.Underlay = append(n.Underlay, a)
	}
	for _, s := range r.PodCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return n, model.Fieldf("pod_cidrs", "%q: not a CIDR prefix like 10.244.1.0/24", s)
		}
		n.PodCIDRs = append(n.PodCIDRs, p)
	}
	return n, nil
}
