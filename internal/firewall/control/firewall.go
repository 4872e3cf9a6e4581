package control

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/fqdn"
	"github.com/xlane-dev/xlane/internal/ktime"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Firewall is the daemon's firewall: the rule set in the store, compiled
// into the datapath's classifier (internal/firewall, bpf/lib/fw.h). Every
// change is validated in full, compiled and installed atomically (packets
// see the old set or the new one), then recorded; a failure changes
// nothing. Changes are serialised with the daemon's other changes.
type Firewall struct {
	c   core.Core
	cfg Config
	in  *firewall.Installer
	err error // why the firewall is unavailable

	// Under the core's lock: what the live generation was compiled from.
	fingerprint string
	classes     int
	bits        map[string]int // rule name -> classifier bits
	slots       map[string]uint32
	names       sync.Map // slot (uint32) -> rule name, for the event log
	// owned is the name prefix of rules a controller owns (ApplyOwned):
	// user changes keep them as they are.
	owned string
	// fqdn follows the endpoints' DNS for the rules with dst_names.
	fqdn *fqdn.FQDN
}

// fwWatchInterval: how often the firewall checks whether the networks and
// endpoints its scopes name have changed.
const fwWatchInterval = 2 * time.Second

// Config is what the firewall needs to know of the rest of the node.
type Config struct {
	// Cluster is the node's cluster (nil or not joined: alone): the
	// blocklist may not cut the node off from other nodes' pods or
	// underlay addresses.
	Cluster Cluster
}

// Cluster is what the blocklist's guard reads of the cluster
// (*cluster.Cluster).
type Cluster interface {
	Joined() bool
	CIDRs() []netip.Prefix
}

// New makes the node's firewall on c's datapath (which must be open):
// internal/xlaned makes it and hands it to the daemon, which starts it (Start).
// Without the BPF datapath the firewall answers every request with why it
// is unavailable.
func New(c core.Core, cfg Config) *Firewall {
	f := &Firewall{c: c, cfg: cfg, bits: map[string]int{}, slots: map[string]uint32{}}
	maps, err := c.Datapath().FirewallMaps()
	if err != nil {
		f.err = fmt.Errorf("firewall: %w", err) // datapath.ErrUnavailable
		return f
	}
	if f.in, f.err = firewall.NewInstaller(maps); f.err != nil {
		f.err = fmt.Errorf("firewall: %w: %w", f.err, model.ErrUnavailable)
	}
	return f
}

// Start starts the firewall (the daemon calls it once, after its
// reconcile and before the API serves): it reinstalls the stored rule set,
// DDoS settings and blocklist (the pinned maps usually hold them already;
// reinstalling makes them this binary's layout), follows endpoint and
// network changes, and logs sampled rule hits until the core is done.
func (f *Firewall) Start() {
	if f.err != nil {
		return
	}
	f.fqdn = fqdn.Start(f.c, f.in.Resolved())
	f.c.Lock()
	err := f.reconcile()
	f.c.Unlock()
	if err != nil {
		f.c.Log().Error("firewall: reconcile", "err", err)
	}
	go f.watch()
	go f.events()
}

// reconcile reinstalls what the store says. Called with the core's lock
// held.
func (f *Firewall) reconcile() error {
	var (
		rs    *rules.RuleSet
		ddos  rules.DDoS
		count int
	)
	err := f.c.Store().View(func(tx *store.Tx) error {
		var err error
		if rs, err = tx.FirewallRules(); err != nil {
			return err
		}
		if ddos, err = tx.FirewallDDoS(); err != nil {
			return err
		}
		count = tx.BlockedCount()
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	if len(rs.Rules) > 0 || len(rs.Defaults) > 0 {
		errs = append(errs, f.store(rs, true, false))
	} else if st, err := f.in.State(); err == nil && st.On != 0 {
		errs = append(errs, f.in.Disable())
	}
	if count != f.in.BlocklistSize() {
		errs = append(errs, f.reloadBlocklist())
	}
	errs = append(errs, f.in.ApplyDDoS(ddos, count))
	return errors.Join(errs...)
}

func (f *Firewall) reloadBlocklist() error {
	if err := f.in.FlushBlocklist(); err != nil {
		return err
	}
	var batch []netip.Prefix
	var errs []error
	err := f.c.Store().View(func(tx *store.Tx) error {
		return tx.Blocked(func(p netip.Prefix) bool {
			batch = append(batch, p)
			if len(batch) == 65536 {
				errs = append(errs, f.in.Block(batch))
				batch = batch[:0]
			}
			return true
		})
	})
	errs = append(errs, err, f.in.Block(batch))
	return errors.Join(errs...)
}

// resolver is the node as the store has it, and its fingerprint.
func (f *Firewall) resolver() (firewall.MapResolver, string, error) {
	res := firewall.MapResolver{Networks: map[string]uint32{}, Endpoints: map[string]firewall.EndpointInfo{}}
	err := f.c.Store().View(func(tx *store.Tx) error {
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		for _, n := range nets {
			res.Networks[n.Name] = n.ID
		}
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		for _, e := range eps {
			res.Endpoints[e.ID] = firewall.EndpointInfo{Network: res.Networks[e.Network], Addrs: e.IPs}
		}
		return nil
	})
	raw, _ := json.Marshal(res)
	sum := sha256.Sum256(raw)
	return res, fmt.Sprintf("%x", sum[:8]), err
}

// Counters is Counter, nil where the firewall counts nothing (not
// available here): the metrics' rule counters (observe.ReportDeps).
func (f *Firewall) Counters() func(slot uint32) (firewall.Counter, error) {
	if f.Available() != nil {
		return nil
	}
	return f.Counter
}

// RuleSlots are the stored rules' counter slots and actions, by name (nil:
// no rule set): the metrics' rule rows (observe.ReportDeps).
func (f *Firewall) RuleSlots(tx *store.Tx) (map[string]firewall.RuleSlot, error) {
	spec, err := ReadRuleSpec(tx)
	if err != nil || spec == nil {
		return nil, err
	}
	out := make(map[string]firewall.RuleSlot, len(spec.Slots))
	for name, slot := range spec.Slots {
		out[name] = firewall.RuleSlot{Slot: slot, Action: spec.Action(name)}
	}
	return out, nil
}

// Available says why the firewall cannot run here (nil: it runs).
func (f *Firewall) Available() error {
	if f.err != nil {
		return f.err
	}
	return nil
}

// store validates rs, compiles and installs it, and records it with its
// counter slots, in one store transaction: an error leaves the live set
// and the store as they were. live: rs was accepted before (scopes that
// vanished since make rules inactive instead of failing).
func (f *Firewall) store(rs *rules.RuleSet, live, dryRun bool) error {
	res, fp, err := f.resolver()
	if err != nil {
		return err
	}
	validate := firewall.Validate
	if live {
		validate = firewall.ValidateLive
	}
	pol, err := validate(rs, res)
	if err != nil {
		return err
	}
	if dryRun {
		return nil
	}
	return f.c.Store().Update(func(tx *store.Tx) error {
		slots, err := tx.FirewallSlots()
		if err != nil {
			return err
		}
		slots, fresh, err := allocSlots(slots, pol)
		if err != nil {
			return err
		}
		for _, s := range fresh {
			if err := f.in.ResetCounter(s); err != nil {
				return fmt.Errorf("reset counters of slot %d: %w", s, err)
			}
		}
		tab, err := firewall.Compile(pol, slots)
		if err != nil {
			return err
		}
		if err := f.c.FaultPoint("firewall-install"); err != nil {
			return err
		}
		if _, err := f.in.Install(tab); err != nil {
			return err
		}
		if err := tx.PutFirewallRules(rs); err != nil {
			return err
		}
		if err := tx.PutFirewallSlots(slots); err != nil {
			return err
		}
		f.fingerprint, f.classes, f.slots = fp, len(tab.Pool), slots
		f.fqdn.SetRules(tab.Resolved)
		f.bits = map[string]int{}
		for _, r := range tab.Bit {
			f.bits[pol.Rules[r].Name]++
		}
		for name, s := range slots {
			f.names.Store(s, name)
		}
		return nil
	})
}

// allocSlots keeps the slots of rules that stay, frees those of rules
// that go, and gives new rules free slots (returned in fresh: their
// counters must be zeroed). A freed slot is reused only by a later
// apply, after the generation that counted into it is gone.
func allocSlots(old map[string]uint32, pol *firewall.Policy) (map[string]uint32, []uint32, error) {
	out := map[string]uint32{}
	used := map[uint32]bool{}
	for _, r := range pol.Rules {
		if s, ok := old[r.Name]; ok {
			out[r.Name] = s
			used[s] = true
		}
	}
	var fresh []uint32
	next := uint32(0)
	for _, r := range pol.Rules {
		if _, ok := out[r.Name]; ok {
			continue
		}
		for next < uint32(firewall.MaxRules) && used[next] {
			next++
		}
		if next >= uint32(firewall.MaxRules) {
			return nil, nil, model.Fieldf("rules", "more than %d rules and defaults", firewall.MaxRules)
		}
		out[r.Name] = next
		used[next] = true
		fresh = append(fresh, next)
	}
	return out, fresh, nil
}

// Apply replaces the rule set; with dryRun it only validates and says
// what would change.
func (f *Firewall) Apply(rs rules.RuleSet, dryRun bool) (*api.FirewallApplied, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	f.c.Lock()
	defer f.c.Unlock()
	if err := f.keepOwned(&rs); err != nil {
		return nil, err
	}
	return f.apply(&rs, dryRun)
}

// apply, with the core's lock held.
func (f *Firewall) apply(rs *rules.RuleSet, dryRun bool) (*api.FirewallApplied, error) {
	var old *rules.RuleSet
	err := f.c.Store().View(func(tx *store.Tx) error {
		var err error
		old, err = tx.FirewallRules()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &api.FirewallApplied{Diff: rules.Compare(old, rs)}
	if err := f.store(rs, false, dryRun); err != nil {
		return nil, err
	}
	if !dryRun {
		out.Applied = true
		st, err := f.in.State()
		if err == nil {
			out.Generation = st.Generation
		}
		f.c.Log().Info("firewall rule set applied", "rules", len(rs.Rules), "defaults", len(rs.Defaults),
			"changes", len(out.Diff.Changes), "generation", out.Generation)
	}
	return out, nil
}

// ApplyOwned replaces the rules whose names start with prefix by owned
// (which must all have it), keeping every other rule and the defaults, in
// one atomic apply; nothing happens when they are already the set's. The
// prefix becomes owned: Kubernetes mode's NetworkPolicies ("k8s.np.").
func (f *Firewall) ApplyOwned(prefix string, owned []rules.Rule) error {
	if prefix == "" {
		return model.Fieldf("prefix", "missing")
	}
	for i, r := range owned {
		if !strings.HasPrefix(r.Name, prefix) {
			return model.Fieldf(fmt.Sprintf("rules[%d].name", i), "%q: does not start with %q", r.Name, prefix)
		}
	}
	f.c.Lock()
	defer f.c.Unlock()
	f.owned = prefix
	if f.err != nil {
		if len(owned) == 0 {
			return nil // nothing to enforce: no firewall needed
		}
		return f.err
	}
	rs, err := f.current()
	if err != nil {
		return err
	}
	next := rs.Clone()
	next.Rules = slices.DeleteFunc(next.Rules, func(r rules.Rule) bool { return strings.HasPrefix(r.Name, prefix) })
	next.Rules = append(next.Rules, owned...)
	if rules.Compare(rs, next).Empty() {
		return nil
	}
	_, err = f.apply(next, false)
	return err
}

// keepOwned makes rs keep the live rules of the owned prefix, whatever it
// says about them (a file exported with them, or written without them):
// they are the owner's. A single-rule change of such a rule is refused.
func (f *Firewall) keepOwned(rs *rules.RuleSet) error {
	if f.owned == "" {
		return nil
	}
	live, err := f.current()
	if err != nil {
		return err
	}
	rs.Rules = slices.DeleteFunc(rs.Rules, func(r rules.Rule) bool { return strings.HasPrefix(r.Name, f.owned) })
	for _, r := range live.Rules {
		if strings.HasPrefix(r.Name, f.owned) {
			rs.Rules = append(rs.Rules, r)
		}
	}
	return nil
}

// refuseOwned refuses a single-rule change of an owned rule.
func (f *Firewall) refuseOwned(name string) error {
	if f.owned != "" && strings.HasPrefix(name, f.owned) {
		return model.Fieldf("name", "%q: rules named %s* are Kubernetes NetworkPolicies' (change the policy instead)", name, f.owned)
	}
	return nil
}

// current returns the stored rule set (the core's lock held or not: a read).
func (f *Firewall) current() (*rules.RuleSet, error) {
	var rs *rules.RuleSet
	err := f.c.Store().View(func(tx *store.Tx) error {
		var err error
		rs, err = tx.FirewallRules()
		return err
	})
	return rs, err
}

// Add adds one rule to the set in force.
func (f *Firewall) Add(r rules.Rule) (*api.FirewallRule, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	f.c.Lock()
	defer f.c.Unlock()
	rs, err := f.current()
	if err != nil {
		return nil, err
	}
	if err := f.refuseOwned(r.Name); err != nil {
		return nil, err
	}
	if rs.Index(r.Name) >= 0 {
		return nil, model.Conflictf("rule %q already exists (update it, or remove it first)", r.Name)
	}
	rs.Rules = append(rs.Rules, r)
	if _, err := f.apply(rs, false); err != nil {
		return nil, err
	}
	return f.rule(r.Name)
}

// Update replaces the rule called name with r (which may rename it).
func (f *Firewall) Update(name string, r rules.Rule) (*api.FirewallRule, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	f.c.Lock()
	defer f.c.Unlock()
	rs, err := f.current()
	if err != nil {
		return nil, err
	}
	i := rs.Index(name)
	if i < 0 {
		return nil, model.NotFoundf("rule %q", name)
	}
	if r.Name == "" {
		r.Name = name
	}
	if err := errors.Join(f.refuseOwned(name), f.refuseOwned(r.Name)); err != nil {
		return nil, err
	}
	if j := rs.Index(r.Name); j >= 0 && j != i {
		return nil, model.Conflictf("rule %q already exists", r.Name)
	}
	rs.Rules[i] = r
	if _, err := f.apply(rs, false); err != nil {
		return nil, err
	}
	return f.rule(r.Name)
}

// Remove removes a rule; a missing one is not an error.
func (f *Firewall) Remove(name string) error {
	if err := f.Available(); err != nil {
		return err
	}
	f.c.Lock()
	defer f.c.Unlock()
	rs, err := f.current()
	if err != nil {
		return err
	}
	i := rs.Index(name)
	if i < 0 {
		return nil
	}
	if err := f.refuseOwned(name); err != nil {
		return err
	}
	rs.Rules = slices.Delete(rs.Rules, i, i+1)
	_, err = f.apply(rs, false)
	return err
}

// Rule returns one rule with its counters.
func (f *Firewall) Rule(name string) (*api.FirewallRule, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	f.c.Lock()
	defer f.c.Unlock()
	return f.rule(name)
}

func (f *Firewall) rule(name string) (*api.FirewallRule, error) {
	fw, err := f.list()
	if err != nil {
		return nil, err
	}
	for _, r := range append(fw.Rules, fw.Defaults...) {
		if r.Name == name {
			return &r, nil
		}
	}
	return nil, model.NotFoundf("rule %q", name)
}

// List returns the rule set in force with counters, in evaluation order.
func (f *Firewall) List() (*api.Firewall, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	f.c.Lock()
	defer f.c.Unlock()
	return f.list()
}

func (f *Firewall) list() (*api.Firewall, error) {
	var (
		rs    *rules.RuleSet
		ddos  rules.DDoS
		count int
	)
	err := f.c.Store().View(func(tx *store.Tx) error {
		var err error
		if rs, err = tx.FirewallRules(); err != nil {
			return err
		}
		ddos, err = tx.FirewallDDoS()
		count = tx.BlockedCount()
		return err
	})
	if err != nil {
		return nil, err
	}
	st, err := f.in.State()
	if err != nil {
		return nil, fmt.Errorf("read firewall state: %w", err)
	}
	out := &api.Firewall{Generation: st.Generation, Enabled: st.On != 0, Established: rs.EstablishedOn(),
		Rules: []api.FirewallRule{}, Classes: f.classes, DDoS: ddos, Blocklist: count}
	// Evaluation order: the validated policy's.
	res, _, err := f.resolver()
	if err != nil {
		return nil, err
	}
	pol, err := firewall.ValidateLive(rs, res)
	if err != nil {
		return nil, err
	}
	byName := map[string]rules.Rule{}
	for _, r := range rs.Rules {
		byName[r.Name] = r
	}
	now := ktime.Now()
	for i, pr := range pol.Rules {
		fr := api.FirewallRule{Position: i + 1, Bits: len(pr.Matches), Default: pr.Default}
		if pr.Default {
			scope, dir := defaultScope(pr.Name)
			fr.Rule = rules.Rule{Name: pr.Name, Scope: scope, Direction: dir, Action: firewall.ActionName(pr.Action)}
		} else {
			fr.Rule = byName[pr.Name]
		}
		if s, ok := f.slots[pr.Name]; ok {
			if c, err := f.in.Counter(s); err == nil {
				fr.Packets, fr.Bytes = c.Packets, c.Bytes
				fr.LastHit = lastHitTime(c.LastHit, now, time.Now())
			}
		}
		if pr.Default {
			out.Defaults = append(out.Defaults, fr)
		} else {
			out.Rules = append(out.Rules, fr)
		}
	}
	for _, rc := range f.c.ReasonCounters(0) {
		if isFirewallReason(rc.Reason) {
			out.Drops = append(out.Drops, rc)
		}
	}
	return out, nil
}

func isFirewallReason(r string) bool {
	return strings.HasPrefix(r, "drop_fw") || r == "drop_blocklist" || r == "drop_rate_limit" ||
		r == "drop_syn_limit" || r == "pass_fw"
}

func defaultScope(name string) (scope, dir string) {
	parts := strings.Split(strings.TrimPrefix(name, "default:"), ":")
	dir = parts[len(parts)-1]
	scope = strings.Join(parts[:len(parts)-1], ":")
	if dir == "any" {
		dir = ""
	}
	if scope == "uplink" {
		dir = ""
	}
	return scope, dir
}

// Diff says what applying rs would change (after validating it).
func (f *Firewall) Diff(rs rules.RuleSet) (*api.FirewallApplied, error) {
	return f.Apply(rs, true)
}

// DDoS returns the uplink's DDoS settings.
func (f *Firewall) DDoS() (*rules.DDoS, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	var d rules.DDoS
	err := f.c.Store().View(func(tx *store.Tx) error {
		var err error
		d, err = tx.FirewallDDoS()
		return err
	})
	return &d, err
}

// SetDDoS replaces the uplink's DDoS settings.
func (f *Firewall) SetDDoS(d rules.DDoS) (*rules.DDoS, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	if err := d.Normalize(); err != nil {
		return nil, err
	}
	f.c.Lock()
	defer f.c.Unlock()
	err := f.c.Store().Update(func(tx *store.Tx) error {
		if err := tx.PutFirewallDDoS(d); err != nil {
			return err
		}
		return f.in.ApplyDDoS(d, tx.BlockedCount())
	})
	if err != nil {
		return nil, err
	}
	f.c.Log().Info("firewall DDoS settings", "pps", d.PPS, "syn_pps", d.SYNPPS, "malformed", d.Malformed)
	return &d, nil
}

// Block adds and removes blocklist prefixes.
func (f *Firewall) Block(req api.FirewallBlock) (*api.FirewallBlocklist, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	parse := func(field string, ss []string) ([]netip.Prefix, error) {
		out := make([]netip.Prefix, 0, len(ss))
		for _, s := range ss {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return nil, model.Fieldf(field, "%q: not an address or CIDR prefix", s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
			}
			out = append(out, p.Masked())
		}
		return out, nil
	}
	add, err := parse("add", req.Add)
	if err != nil {
		return nil, err
	}
	rm, err := parse("remove", req.Remove)
	if err != nil {
		return nil, err
	}
	f.c.Lock()
	defer f.c.Unlock()
	out := &api.FirewallBlocklist{}
	err = f.c.Store().Update(func(tx *store.Tx) error {
		if len(add) > 0 {
			g, err := f.newBlockGuard(tx)
			if err != nil {
				return err
			}
			for i, p := range add {
				if err := g.check(fmt.Sprintf("add[%d]", i), p); err != nil {
					return err
				}
			}
		}
		if err := tx.PutBlocked(add); err != nil {
			return err
		}
		if err := tx.DeleteBlocked(rm); err != nil {
			return err
		}
		if err := f.in.Block(add); err != nil {
			f.in.Unblock(add)
			return err
		}
		return f.in.Unblock(rm)
	})
	if err != nil {
		return nil, err
	}
	// Counted after the commit: a bucket's statistics in a write
	// transaction miss what it added.
	var d rules.DDoS
	err = f.c.Store().View(func(tx *store.Tx) error {
		out.Count = tx.BlockedCount()
		d, err = tx.FirewallDDoS()
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, f.in.ApplyDDoS(d, out.Count)
}

// Blocklist returns the blocklist's size and up to limit entries.
func (f *Firewall) Blocklist(limit int) (*api.FirewallBlocklist, error) {
	if err := f.Available(); err != nil {
		return nil, err
	}
	out := &api.FirewallBlocklist{}
	err := f.c.Store().View(func(tx *store.Tx) error {
		out.Count = tx.BlockedCount()
		if limit <= 0 {
			return nil
		}
		return tx.Blocked(func(p netip.Prefix) bool {
			out.Entries = append(out.Entries, p.String())
			return len(out.Entries) < limit
		})
	})
	return out, err
}

// FlushBlocklist empties the blocklist.
func (f *Firewall) FlushBlocklist() error {
	if err := f.Available(); err != nil {
		return err
	}
	f.c.Lock()
	defer f.c.Unlock()
	return f.c.Store().Update(func(tx *store.Tx) error {
		if err := tx.FlushBlocked(); err != nil {
			return err
		}
		if err := f.in.FlushBlocklist(); err != nil {
			return err
		}
		d, err := tx.FirewallDDoS()
		if err != nil {
			return err
		}
		return f.in.ApplyDDoS(d, 0)
	})
}

// watch recompiles the rule set when the networks or endpoints its scopes
// resolve to change (an endpoint-scoped rule compiles to the endpoint's
// addresses and network).
func (f *Firewall) watch() {
	t := time.NewTicker(fwWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-f.c.Done():
			return
		case <-t.C:
		}
		f.c.Lock()
		rs, err := f.current()
		if err == nil && (len(rs.Rules) > 0 || len(rs.Defaults) > 0) && f.namesScopes(rs) {
			var fp string
			if _, fp, err = f.resolver(); err == nil && fp != f.fingerprint {
				err = f.store(rs, true, false)
				if err == nil {
					f.c.Log().Info("firewall recompiled: networks or endpoints changed")
				}
			}
		}
		f.c.Unlock()
		if err != nil {
			f.c.Log().Error("firewall: follow endpoint changes", "err", err)
		}
	}
}

// namesScopes reports whether rs has network or endpoint scopes.
func (f *Firewall) namesScopes(rs *rules.RuleSet) bool {
	for _, r := range rs.Rules {
		if strings.HasPrefix(r.Scope, "network:") || strings.HasPrefix(r.Scope, "endpoint:") {
			return true
		}
	}
	for _, d := range rs.Defaults {
		if strings.HasPrefix(d.Scope, "network:") || strings.HasPrefix(d.Scope, "endpoint:") {
			return true
		}
	}
	return false
}

// events logs the sampled rule hits of the datapath (rules with log: N,
// and log rules).
func (f *Firewall) events() {
	err := f.in.Events(f.c.Done(), func(e firewall.Event) {
		name, _ := f.names.Load(e.Slot)
		f.c.Log().Info("firewall", "rule", name, "action", e.Action, "hook", e.Kind.String(),
			"proto", e.Proto, "src", e.Src, "sport", e.Sport, "dst", e.Dst, "dport", e.Dport,
			"len", e.Len, "ifindex", e.Ifindex)
	})
	if err != nil && !errors.Is(err, firewall.ErrEventsClosed) {
		f.c.Log().Error("firewall: read events", "err", err)
	}
}

// RuleName is the rule in slot (the monitor's events name it).
func (f *Firewall) RuleName(slot uint32) (string, bool) {
	name, ok := f.names.Load(slot)
	if !ok {
		return "", false
	}
	return name.(string), true
}
