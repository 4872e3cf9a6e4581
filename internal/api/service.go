package api

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/xlane-dev/xlane/internal/model"
)

// The service requests carry text (IP:PORT/PROTO, IP:PORT@WEIGHT); these
// read it into model types, the only place that does: from here on the
// daemon, the store and the datapath see model.Service. Errors name the
// field; what is not about the text (families, duplicates, affinity) the
// daemon checks (model.Service.Validate).

// Service reads a create request into a service (no ID yet).
func (r ServiceCreate) Service() (model.Service, error) {
	s := model.Service{Name: r.Name, Proto: "tcp", Affinity: r.Affinity, AffinityTimeout: r.AffinityTimeout}
	vip, proto, hasProto := strings.Cut(r.VIP, "/")
	if hasProto {
		if proto != "tcp" && proto != "udp" {
			return s, model.Fieldf("vip", "%q: protocol %q is not tcp or udp", r.VIP, proto)
		}
		s.Proto = proto
	}
	ap, err := netip.ParseAddrPort(vip)
	if err != nil || ap.Port() == 0 {
		return s, model.Fieldf("vip", "%q: want IP:PORT[/tcp|udp] (IPv6: [ADDR]:PORT)", r.VIP)
	}
	s.VIP = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	s.Backends, err = ParseBackends(r.Backends)
	return s, err
}

// ParseBackends reads IP:PORT[@WEIGHT] backends; nil stays nil.
func ParseBackends(specs []string) ([]model.Backend, error) {
	if specs == nil {
		return nil, nil
	}
	out := make([]model.Backend, 0, len(specs))
	for _, s := range specs {
		b, err := ParseBackend(s)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// ParseBackend reads IP:PORT[@WEIGHT] ([v6]:PORT for IPv6); weight 1.
func ParseBackend(s string) (model.Backend, error) {
	spec, w, hasW := strings.Cut(s, "@")
	b := model.Backend{Weight: 1}
	ap, err := netip.ParseAddrPort(spec)
	if err != nil || ap.Port() == 0 {
		return b, model.Fieldf("backends", "%q: want IP:PORT[@WEIGHT] (IPv6: [ADDR]:PORT)", s)
	}
	b.Addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if hasW {
		v, err := strconv.ParseUint(w, 10, 32)
		if err != nil || v > model.MaxWeight {
			return b, model.Fieldf("backends", "%q: weight %q is not a number from 0 (drain) to %d", s, w, model.MaxWeight)
		}
		b.Weight = uint32(v)
	}
	return b, nil
}

// BackendSpecs writes backends as ParseBackends reads them.
func BackendSpecs(bs []model.Backend) []string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.String())
	}
	return out
}

// Update reads an update request.
func (r ServiceUpdate) Update() (model.ServiceUpdate, error) {
	bs, err := ParseBackends(r.Backends)
	return model.ServiceUpdate{Backends: bs, Affinity: r.Affinity, AffinityTimeout: r.AffinityTimeout}, err
}

// Apply reads an apply request; an error names the service by its index
// (services[3].vip).
func (r ServiceApply) Apply() (model.ServiceApply, error) {
	out := model.ServiceApply{Prune: r.Prune, PrunePrefix: r.PrunePrefix, Delete: r.Delete, Services: make([]model.Service, len(r.Services))}
	for i, sc := range r.Services {
		s, err := sc.Service()
		if err != nil {
			return out, model.IndexedField("services", i, err)
		}
		out.Services[i] = s
	}
	return out, nil
}
