package daemon

import (
	"fmt"
	"slices"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/firewall/control"
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
func (d *Daemon) Snapshot() *metrics.Snapshot {
	s := &metrics.Snapshot{Errors: map[string]error{}, Unapplied: d.objErrs.counts(), WireGuard: d.cluster.WireGuardMetrics()}
	if d.dp.Available() != nil {
		return s // kernel mode only: no maps, nothing counted
	}
	var (
		eps   []model.Endpoint
		svcs  []model.Service
		rules *control.RuleSpec
	)
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		if eps, err = tx.Endpoints(); err != nil {
			return err
		}
		if svcs, err = tx.Services(); err != nil {
			return err
		}
		rules, err = control.ReadRuleSpec(tx)
		return err
	})
	if err != nil {
		s.Errors["store"] = err
		return s
	}
	eps = slices.DeleteFunc(eps, func(e model.Endpoint) bool { return core.Hidden(e.Network) }) // the calibration's (internal/calibration)
	s.Counters, err = d.reasonCounts(eps)
	if err != nil {
		s.Errors["counters"] = err
	}
	known := map[string]int{}
	if st, err := d.dp.CTStats(); err != nil {
		s.Errors["conntrack"] = err
	} else {
		known["xlane_ct"] = st.Entries // one walk of the table per scrape
		s.CT = &metrics.CT{Entries: st.Entries, Expired: st.Expired, MaxEntries: st.MaxEntries,
			GCRuns: d.ct.gcRuns.Load(), GCDeleted: d.ct.gcDeleted.Load(),
			GCDuration: time.Duration(d.ct.gcNanos.Load()), GCLast: d.ct.lastRun()}
		s.Services, s.Backends = serviceCounts(svcs, st.DNAT)
	}
	if us, err := d.dp.MapUsage(known); err != nil {
		s.Errors["maps"] = err
	} else {
		for _, u := range us {
			s.Maps = append(s.Maps, metrics.MapCount{Name: u.Name, Entries: u.Entries, MaxEntries: u.MaxEntries})
		}
	}
	if d.fw != nil && d.fw.Available() == nil && rules != nil {
		for name, slot := range rules.Slots {
			c, err := d.fw.Counter(slot)
			if err != nil {
				s.Errors["firewall"] = fmt.Errorf("rule %s: %w", name, err)
				continue
			}
			s.Rules = append(s.Rules, metrics.RuleCount{Rule: name, Action: rules.Action(name), Packets: c.Packets, Bytes: c.Bytes})
		}
	}
	if ps, err := d.dp.ProgramStats(); err != nil {
		s.Errors["programs"] = err
	} else {
		for _, p := range ps {
			s.Programs = append(s.Programs, metrics.ProgramCount{Program: p.Name, Runs: p.Runs, Runtime: p.Runtime})
		}
	}
	s.StatsEnabled = d.runStats != nil || datapath.RunStatsSysctl()
	n := d.neigh.Status()
	s.Neigh = &metrics.Neigh{Events: n.Events, Resyncs: n.Resyncs}
	if st, err := d.dp.AccelStatus(); err != nil {
		s.Errors["accel"] = err
	} else if st.Counters != nil {
		s.Accel = &metrics.Accel{On: st.Attached && st.On, Sockets: st.Sockets, Counters: st.Counters}
	}
	if c, err := d.dp.ProxyStats(); err != nil {
		s.Errors["proxy"] = err
	} else {
		s.Proxy = c
	}
	return s
}

// reasonCounts labels the datapath's counters with the attach point that
// decided, and the endpoint and network of their device, the uplink, or
// the node (ifindex 0).
func (d *Daemon) reasonCounts(eps []model.Endpoint) ([]metrics.ReasonCount, error) {
	byIfindex, err := d.dp.CountersByIfindex()
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
	if i, ok := ifindexOf[d.cfg.Uplink]; ok && d.cfg.Uplink != "" {
		owners[i] = owner{device: metrics.DeviceUplink}
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
		proto := protoNumber(sv.Proto)
		for _, b := range sv.Backends {
			n := dnat[datapath.DNATFlow{Proto: proto, Dst: sv.VIP, Target: b.Addr}]
			flows = append(flows, metrics.BackendFlows{Service: sv.Name, Backend: b.Addr.String(), Flows: n})
		}
	}
	return counts, flows
}
