package observe

import (
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/metrics"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Snapshot is what a Prometheus scrape exports (internal/metrics), read
// now from the BPF maps, the store and the node's links: one walk of
// xlane_metrics, one of xlane_ct, a count of every map that fills up,
// the firewall's rule counters, the programs' run statistics. Counters
// of a device that belongs to no endpoint (removed, not yet pruned) are
// left out, so a removed endpoint's series end with it. It takes no
// daemon lock: a scrape never waits for a change in progress.
func (r *Reporter) Snapshot() *metrics.Snapshot {
	dp, cs := r.c.Datapath(), r.c.Status()
	s := &metrics.Snapshot{Errors: map[string]error{}, Unapplied: unappliedCounts(cs.ObjectErrors)}
	if r.deps.WireGuard != nil {
		s.WireGuard = r.deps.WireGuard()
	}
	if dp.Available() != nil {
		return s // kernel mode only: no maps, nothing counted
	}
	var (
		eps   []model.Endpoint
		svcs  []model.Service
		rules map[string]RuleSlot
	)
	err := r.c.Store().View(func(tx *store.Tx) error {
		var err error
		if eps, err = tx.Endpoints(); err != nil {
			return err
		}
		if svcs, err = tx.Services(); err != nil {
			return err
		}
		if r.deps.Rules != nil {
			rules, err = r.deps.Rules(tx)
		}
		return err
	})
	if err != nil {
		s.Errors["store"] = err
		return s
	}
	eps = slices.DeleteFunc(eps, func(e model.Endpoint) bool { return core.Hidden(e.Network) }) // the calibration's (internal/calibration)
	s.Counters, err = reasonCounts(dp, cs.Uplink, eps)
	if err != nil {
		s.Errors["counters"] = err
	}
	known := map[string]int{}
	if st, err := dp.CTStats(); err != nil {
		s.Errors["conntrack"] = err
	} else {
		known["xlane_ct"] = st.Entries // one walk of the table per scrape
		s.CT = &metrics.CT{Entries: st.Entries, Expired: st.Expired, MaxEntries: st.MaxEntries,
			GCRuns: cs.GC.Runs, GCDeleted: cs.GC.Deleted,
			GCDuration: cs.GC.Duration, GCLast: cs.GC.LastRun}
		s.Services, s.Backends = serviceCounts(svcs, st.DNAT)
	}
	if us, err := dp.MapUsage(known); err != nil {
		s.Errors["maps"] = err
	} else {
		for _, u := range us {
			s.Maps = append(s.Maps, metrics.MapCount{Name: u.Name, Entries: u.Entries, MaxEntries: u.MaxEntries})
		}
	}
	if r.deps.RuleCounters != nil {
		if counter := r.deps.RuleCounters(); counter != nil && rules != nil {
			for name, rs := range rules {
				c, err := counter(rs.Slot)
				if err != nil {
					s.Errors["firewall"] = fmt.Errorf("rule %s: %w", name, err)
					continue
				}
				s.Rules = append(s.Rules, metrics.RuleCount{Rule: name, Action: rs.Action, Packets: c.Packets, Bytes: c.Bytes})
			}
		}
	}
	if ps, err := dp.ProgramStats(); err != nil {
		s.Errors["programs"] = err
	} else {
		for _, p := range ps {
			s.Programs = append(s.Programs, metrics.ProgramCount{Program: p.Name, Runs: p.Runs, Runtime: p.Runtime})
		}
	}
	s.StatsEnabled = cs.RunStats || datapath.RunStatsSysctl()
	if r.deps.Neigh != nil {
		n := r.deps.Neigh()
		s.Neigh = &metrics.Neigh{Events: n.Events, Resyncs: n.Resyncs}
	}
	if st, err := dp.AccelStatus(); err != nil {
		s.Errors["accel"] = err
	} else if st.Counters != nil {
		s.Accel = &metrics.Accel{On: st.Attached && st.On, Sockets: st.Sockets, Counters: st.Counters}
	}
	if c, err := dp.ProxyStats(); err != nil {
		s.Errors["proxy"] = err
	} else {
		s.Proxy = c
	}
	return s
}

// unappliedCounts counts the objects the core could not apply by kind
// (every kind, 0 or not, so that the series stay).
func unappliedCounts(errs []core.ObjectError) map[string]int {
	out := map[string]int{core.ObjNetwork: 0, core.ObjEndpoint: 0, core.ObjPeer: 0, core.ObjNode: 0}
	for _, e := range errs {
		out[e.Kind]++
	}
	return out
}

// reasonCounts labels the datapath's counters with the attach point that
// decided, and the endpoint and network of their device, the uplink, or
// the node (ifindex 0).
func reasonCounts(dp datapath.Datapath, uplink string, eps []model.Endpoint) ([]metrics.ReasonCount, error) {
	byIfindex, err := dp.CountersByIfindex()
	if err != nil {
		return nil, err
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	ifindexOf := map[string]int{}
	for _, l := range links {
		ifindexOf[l.Attrs().Name] = l.Attrs().Index
	}
	type owner struct{ device, endpoint, network string }
	owners := map[int]owner{0: {device: metrics.DeviceNode}}
	if i, ok := ifindexOf[uplink]; ok && uplink != "" {
		owners[i] = owner{device: metrics.DeviceUplink}
	}
	// The overlay's programs count on the VXLAN device: what peers
	// tunnelled here (drop_vni, strict's drop_unencrypted), what Linux
	// routes to them (drop_no_peer, drop_peer_down).
	if i, ok := ifindexOf[datapath.OverlayDevice]; ok {
		owners[i] = owner{device: metrics.DeviceOverlay}
	}
	for _, e := range eps {
		if i, ok := ifindexOf[e.HostIf]; ok {
			owners[i] = owner{metrics.DeviceEndpoint, e.ID, e.Network}
		}
	}
	var out []metrics.ReasonCount
	for ifindex, cs := range byIfindex {
		o, ok := owners[ifindex]
		if !ok {
			continue
		}
		for k, c := range cs {
			out = append(out, metrics.ReasonCount{Endpoint: o.endpoint, Network: o.network,
				Hook: k.Hook.String(), Device: o.device,
				Direction: k.Dir.String(), Reason: k.Reason.String(), Verdict: verdict(k.Reason),
				Packets: c.Packets, Bytes: c.Bytes})
		}
	}
	return out, nil
}

func verdict(r datapath.Reason) string {
	switch r.Class() {
	case datapath.ClassForward:
		return metrics.VerdictForwarded
	case datapath.ClassDrop:
		return metrics.VerdictDropped
	}
	return metrics.VerdictPassed
}

// serviceCounts counts each service's backends by state and its tracked
// flows by the backend they went to (DNAT entries whose destination is the
// service's VIP).
func serviceCounts(svcs []model.Service, dnat map[datapath.DNATFlow]int) ([]metrics.ServiceCount, []metrics.BackendFlows) {
	var (
		counts []metrics.ServiceCount
		flows  []metrics.BackendFlows
	)
	for _, sv := range svcs {
		c := metrics.ServiceCount{Service: sv.Name}
		for _, b := range sv.Backends {
			if b.Weight == 0 {
				c.Draining++
			} else {
				c.Active++
			}
		}
		counts = append(counts, c)
		proto := uint8(unix.IPPROTO_TCP)
		if sv.Proto == "udp" {
			proto = unix.IPPROTO_UDP
		}
		for _, b := range sv.Backends {
			n := dnat[datapath.DNATFlow{Proto: proto, Dst: sv.VIP, Target: b.Addr}]
			flows = append(flows, metrics.BackendFlows{Service: sv.Name, Backend: b.Addr.String(), Flows: n})
		}
	}
	return counts, flows
}
