package accelproxy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Transparent proxy redirects (api.ProxyRedirect): the store's records,
// the datapath's rules and, for inbound redirects, the listeners xlaned
// holds (socket acceleration: accel.go).

func exemptKind(s string) (uint8, error) {
	switch s {
	case "mark":
		return datapath.ProxyExemptMark, nil
	case "cgroup":
		return datapath.ProxyExemptCgroup, nil
	case "uid":
		return datapath.ProxyExemptUID, nil
	}
	return 0, model.Fieldf("exempt", "%q: want mark, uid or cgroup (how the proxy's own connections are recognised)", s)
}

// proxyRule turns a record into the map's rule.
func proxyRule(r store.ProxyRecord) (datapath.ProxyRule, error) {
	k, err := exemptKind(r.Exempt)
	if err != nil {
		return datapath.ProxyRule{}, err
	}
	rule := datapath.ProxyRule{Port: r.Port, ToPort: r.To, Exempt: k, Mark: r.Mark, UID: r.UID}
	if k == datapath.ProxyExemptCgroup {
		if rule.CgroupID, err = datapath.CgroupID(r.ExemptCgroup); err != nil {
			return rule, model.Fieldf("exempt_cgroup", "%v", err)
		}
	}
	return rule, nil
}

// AddProxyRedirect redirects connections to req.Port to the proxy on
// req.To. Refused: a port already redirected, a redirect to itself, an
// unknown exemption. Nobody listening on To is a warning (the proxy may
// start later), not a refusal.
// networkRefused: a redirect by network is refused in both directions.
// Inbound, sk_lookup hands a connection only to a listening socket of the
// namespace it runs in, and each endpoint of a network has its own
// namespace: a proxy listening elsewhere (xlaned's namespace, another
// endpoint's) cannot be given it, so a redirect "for network N" would need
// a sidecar proxy in every endpoint namespace and one redirect per
// namespace (docs/accel.md). Outbound, connect() hooks attach to cgroups,
// and an endpoint's processes are in cgroups xlane does not know.
func networkRefused(req api.ProxyRedirect) error {
	if req.Direction == "in" {
		return model.Fieldf("network", "%q: not supported with direction \"in\": sk_lookup can hand a connection only to a proxy listening in the same network namespace, and each endpoint of a network has its own; run the proxy as a sidecar in the endpoint's namespace and redirect there with --netns (the endpoint's namespace path, e.g. /run/netns/NAME or /proc/PID/ns/net), one redirect per endpoint", req.Network)
	}
	return model.Fieldf("network", "%q: not supported with direction \"out\": outbound redirects select their clients by cgroup (connect() hooks attach to cgroups, not networks): use --cgroup with the cgroup of the endpoint's processes", req.Network)
}

func (ap *Control) AddProxyRedirect(req api.ProxyRedirect) (*api.ProxyRedirect, error) {
	if err := ap.dp().Available(); err != nil {
		return nil, err
	}
	if req.Port == 0 {
		return nil, model.Fieldf("port", "missing: the destination port to redirect")
	}
	if req.To == 0 {
		return nil, model.Fieldf("to", "missing: the proxy's port on loopback")
	}
	if req.To == req.Port {
		return nil, model.Fieldf("to", "%d: the proxy's port cannot be the redirected port (every connection to the proxy would be redirected to itself)", req.To)
	}
	if req.Network != "" {
		return nil, networkRefused(req)
	}
	switch req.Direction {
	case "", "out":
		if req.Netns != "" {
			return nil, model.Fieldf("netns", "%q: only with direction \"in\" (outbound redirects act in the clients' own namespaces)", req.Netns)
		}
	case "in":
	default:
		return nil, model.Fieldf("direction", "%q: want \"out\" (connections the cgroup's processes make) or \"in\" (connections arriving at the port)", req.Direction)
	}
	cg, err := accelCgroup(req.Cgroup, "cgroup")
	if err != nil {
		return nil, err
	}
	rec := store.ProxyRecord{Port: req.Port, To: req.To, Cgroup: cg, Exempt: req.Exempt, Mark: req.Mark, UID: req.UID}
	if req.Direction == "in" {
		rec.Direction, rec.Netns = "in", req.Netns
		if rec.NetnsCookie, err = datapath.NetnsCookie(netnsPath(rec)); err != nil {
			return nil, model.Fieldf("netns", "%v", err)
		}
	}
	if req.Exempt == "cgroup" {
		if req.ExemptCgroup == "" {
			return nil, model.Fieldf("exempt_cgroup", "missing: the proxy's cgroup")
		}
		if rec.ExemptCgroup, err = accelCgroup(req.ExemptCgroup, "exempt_cgroup"); err != nil {
			return nil, err
		}
	}
	if req.Exempt == "mark" && req.Mark == 0 {
		return nil, model.Fieldf("mark", "missing: the SO_MARK the proxy sets on its upstream connections")
	}
	rule, err := proxyRule(rec)
	if err != nil {
		return nil, err
	}
	ap.c.Lock()
	defer ap.c.Unlock()
	var have []store.ProxyRecord
	if err := ap.c.Store().View(func(tx *store.Tx) (err error) { have, err = tx.ProxyRedirects(); return }); err != nil {
		return nil, err
	}
	if err := proxyClash(rec, have); err != nil {
		return nil, err
	}
	if err := ensureOwnCgroup(cg); err != nil {
		return nil, err
	}
	if rec.Direction == "in" {
		out, err := ap.addProxyIn(rec, rule, have)
		if err != nil {
			ap.releaseOwnCgroup()
		}
		return out, err
	}
	if err := ap.dp().AttachProxy(cg); err != nil {
		ap.releaseOwnCgroup()
		return nil, err
	}
	undo := func() {
		defer ap.releaseOwnCgroup()
		ap.dp().DeleteProxyRule(req.Port)
		if !slices.ContainsFunc(have, func(h store.ProxyRecord) bool { return h.Cgroup == cg }) {
			if id, err := datapath.CgroupID(cg); err == nil {
				ap.dp().DetachProxy(id)
			}
		}
	}
	if err := ap.dp().PutProxyRule(rule); err != nil {
		undo()
		return nil, err
	}
	if err := ap.c.Store().Update(func(tx *store.Tx) error { return tx.PutProxyRedirect(rec) }); err != nil {
		undo()
		return nil, err
	}
	out := proxyAPI(rec)
	if !accel.Listening(req.To) {
		out.Warning = fmt.Sprintf("nothing listens on 127.0.0.1:%d or [::1]:%d yet: redirected connections are refused until the proxy runs", req.To, req.To)
		ap.c.Log().Warn("proxy redirect: nobody listens on the proxy port", "port", req.Port, "to", req.To)
	}
	return &out, nil
}

func proxyAPI(r store.ProxyRecord) api.ProxyRedirect {
	dir := r.Direction
	if dir == "" {
		dir = "out"
	}
	return api.ProxyRedirect{Port: r.Port, To: r.To, Cgroup: r.Cgroup, Direction: dir, Netns: r.Netns, Exempt: r.Exempt,
		Mark: r.Mark, UID: r.UID, ExemptCgroup: r.ExemptCgroup, Key: r.Key()}
}

// netnsPath is the network namespace of an inbound redirect: the daemon's
// own for "".
func netnsPath(r store.ProxyRecord) string {
	if r.Netns == "" {
		return "/proc/self/ns/net"
	}
	return r.Netns
}

func proxyInRule(r store.ProxyRecord, rule datapath.ProxyRule) datapath.ProxyInRule {
	return datapath.ProxyInRule{ProxyRule: rule, Netns: r.NetnsCookie}
}

// proxyListeners finds the proxy's listening sockets for an inbound
// redirect (copies: the caller closes them), refusing what the programs
// could not use.
func proxyListeners(r store.ProxyRecord) ([]accel.Listener, error) {
	ls, err := accel.FindListeners(netnsPath(r), r.To)
	if errors.Is(err, accel.ErrNoListener) {
		return nil, model.Fieldf("to", "%d: nothing listens on it in network namespace %s: start the proxy first (the redirect hands it the connections to port %d)", r.To, netnsPath(r), r.Port)
	}
	if err != nil {
		return nil, model.Fieldf("to", "%d: %v", r.To, err)
	}
	var bad error
	for _, l := range ls {
		switch {
		case l.MPTCP:
			bad = model.Fieldf("to", "%d: the proxy (pid %d) listens with MPTCP (Go 1.24+ does by default), which a socket map cannot hold: listen with plain TCP (Go: ListenConfig.SetMultipathTCP(false), or GODEBUG=multipathtcp=0)", r.To, l.Pid)
		case !accel.InCgroup(l.Cgroup, r.Cgroup):
			bad = model.Fieldf("cgroup", "%s: the proxy listening on port %d (pid %d) runs in cgroup %s, not in it or below (its getsockopt(SO_ORIGINAL_DST) and a restart's listen() would go unseen)", r.Cgroup, r.To, l.Pid, l.Cgroup)
		}
	}
	if bad != nil {
		closeListeners(ls)
		return nil, bad
	}
	return ls, nil
}

func closeListeners(ls []accel.Listener) {
	for _, l := range ls {
		l.File.Close()
	}
}

// addProxyIn attaches an inbound redirect: the cgroup hooks (the proxy's
// getsockopt, listen and connect), the rule, the proxy's listeners, then
// sk_lookup on the namespace; all or nothing.
func (ap *Control) addProxyIn(rec store.ProxyRecord, rule datapath.ProxyRule, have []store.ProxyRecord) (*api.ProxyRedirect, error) {
	ls, err := proxyListeners(rec)
	if err != nil {
		return nil, err
	}
	defer closeListeners(ls)
	in := proxyInRule(rec, rule)
	if err := ap.dp().AttachProxy(rec.Cgroup); err != nil {
		return nil, err
	}
	undo := func() {
		if !slices.ContainsFunc(have, func(h store.ProxyRecord) bool { return h.Direction == "in" && h.NetnsCookie == rec.NetnsCookie }) {
			ap.dp().DetachProxyIn(rec.NetnsCookie)
		}
		ap.dp().DeleteProxyInRule(in)
		if !slices.ContainsFunc(have, func(h store.ProxyRecord) bool { return h.Cgroup == rec.Cgroup }) {
			if id, err := datapath.CgroupID(rec.Cgroup); err == nil {
				ap.dp().DetachProxy(id)
			}
		}
	}
	if err := ap.dp().PutProxyInRule(in); err != nil {
		undo()
		return nil, err
	}
	for _, l := range ls {
		if err := ap.dp().PutProxyListener(rec.NetnsCookie, rec.To, l.Family, int(l.File.Fd())); err != nil {
			undo()
			return nil, model.Fieldf("to", "%d: the proxy's listener (pid %d): %v", rec.To, l.Pid, err)
		}
	}
	if err := ap.dp().AttachProxyIn(netnsPath(rec), rec.NetnsCookie); err != nil {
		undo()
		return nil, err
	}
	if err := ap.c.Store().Update(func(tx *store.Tx) error { return tx.PutProxyRedirect(rec) }); err != nil {
		undo()
		return nil, err
	}
	ap.c.Log().Info("inbound proxy redirect", "port", rec.Port, "to", rec.To, "netns", netnsPath(rec), "listeners", len(ls))
	out := proxyAPI(rec)
	return &out, nil
}

// ProxyRedirects lists the redirects and the counters.
func (ap *Control) ProxyRedirects() (*api.ProxyList, error) {
	ap.c.Lock()
	defer ap.c.Unlock()
	var have []store.ProxyRecord
	if err := ap.c.Store().View(func(tx *store.Tx) (err error) { have, err = tx.ProxyRedirects(); return }); err != nil {
		return nil, err
	}
	out := &api.ProxyList{Redirects: []api.ProxyRedirect{}}
	for _, h := range have {
		out.Redirects = append(out.Redirects, proxyAPI(h))
	}
	if ap.dp().Available() == nil {
		out.Counters, _ = ap.dp().ProxyStats()
	}
	return out, nil
}

// DeleteProxyRedirect removes the redirect of port named by key (its Key;
// "": the only redirect of port, refused naming the candidates when there
// are several; none is fine), and the programs of its cgroup and its
// network namespace when no other redirect uses them.
func (ap *Control) DeleteProxyRedirect(port uint16, key string) error {
	ap.c.Lock()
	defer ap.c.Unlock()
	var have []store.ProxyRecord
	if err := ap.c.Store().View(func(tx *store.Tx) (err error) { have, err = tx.ProxyRedirects(); return }); err != nil {
		return err
	}
	gone, ok, err := proxyPick(have, port, key)
	if err != nil || !ok {
		return err
	}
	others := slices.DeleteFunc(slices.Clone(have), func(h store.ProxyRecord) bool { return h.Key() == gone.Key() })
	if gone.Direction == "in" {
		if !slices.ContainsFunc(others, func(h store.ProxyRecord) bool {
			return h.Direction == "in" && h.NetnsCookie == gone.NetnsCookie
		}) {
			if err := ap.dp().DetachProxyIn(gone.NetnsCookie); err != nil {
				return err
			}
		}
		rule, _ := proxyRule(gone)
		rule.Port, rule.ToPort = gone.Port, gone.To
		if err := ap.dp().DeleteProxyInRule(proxyInRule(gone, rule)); err != nil {
			return err
		}
	} else if err := ap.dp().DeleteProxyRule(port); err != nil {
		return err
	}
	if err := ap.c.Store().Update(func(tx *store.Tx) error { return tx.DeleteProxyRedirect(gone) }); err != nil {
		return err
	}
	defer ap.releaseOwnCgroup()
	if !slices.ContainsFunc(others, func(h store.ProxyRecord) bool { return h.Cgroup == gone.Cgroup }) {
		if id, err := datapath.CgroupID(gone.Cgroup); err == nil {
			return ap.dp().DetachProxy(id)
		}
	}
	return nil
}

// reconcileProxy makes the rules and cgroup attachments what the store
// says: missing ones attached, others removed.
func (ap *Control) reconcileProxy() error {
	var have []store.ProxyRecord
	if err := ap.c.Store().View(func(tx *store.Tx) (err error) { have, err = tx.ProxyRedirects(); return }); err != nil {
		return err
	}
	var errs []error
	want := map[uint64]bool{}
	ports := map[uint16]bool{}
	type inKey struct {
		netns uint64
		port  uint16
	}
	wantIn, wantNetns := map[inKey]bool{}, map[uint64]bool{}
	for _, h := range have {
		rule, err := proxyRule(h)
		if err == nil {
			err = ensureOwnCgroup(h.Cgroup)
		}
		if err == nil {
			err = ap.dp().AttachProxy(h.Cgroup)
		}
		if err == nil && h.Direction == "in" {
			old := h.NetnsCookie
			if h.NetnsCookie, err = datapath.NetnsCookie(netnsPath(h)); err == nil && h.NetnsCookie != old {
				// The path names a new namespace now (a container
				// restarted): what was attached to the old one went
				// with it; rm must find the new one.
				err = ap.c.Store().Update(func(tx *store.Tx) error { return tx.PutProxyRedirect(h) })
			}
			if err == nil {
				wantIn[inKey{h.NetnsCookie, h.Port}], wantNetns[h.NetnsCookie] = true, true
				err = ap.reconcileProxyIn(h, rule)
			}
		} else if err == nil {
			ports[h.Port] = true
			err = ap.dp().PutProxyRule(rule)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("redirect of port %d: %w", h.Port, err))
			continue
		}
		if id, err := datapath.CgroupID(h.Cgroup); err == nil {
			want[id] = true
		}
	}
	rules, err := ap.dp().ProxyRules()
	errs = append(errs, err)
	for p := range rules {
		if !ports[p] {
			errs = append(errs, ap.dp().DeleteProxyRule(p))
		}
	}
	ids, err := ap.dp().ProxyCgroups()
	errs = append(errs, err)
	for _, id := range ids {
		if !want[id] {
			errs = append(errs, ap.dp().DetachProxy(id))
		}
	}
	nss, err := ap.dp().ProxyInNetns()
	errs = append(errs, err)
	for _, n := range nss {
		if !wantNetns[n] {
			errs = append(errs, ap.dp().DetachProxyIn(n))
		}
	}
	inRules, err := ap.dp().ProxyInRules()
	errs = append(errs, err)
	for _, r := range inRules {
		if !wantIn[inKey{r.Netns, r.Port}] {
			errs = append(errs, ap.dp().DeleteProxyInRule(r))
		}
	}
	return errors.Join(errs...)
}

// reconcileProxyIn re-applies an inbound redirect at start. The proxy's
// listeners normally survive in the pinned socket map; if they are gone
// (the map was replaced), the running proxy's are taken again.
func (ap *Control) reconcileProxyIn(h store.ProxyRecord, rule datapath.ProxyRule) error {
	if err := ap.dp().PutProxyInRule(proxyInRule(h, rule)); err != nil {
		return err
	}
	if !ap.dp().ProxyListener(h.NetnsCookie, h.To, 4) && !ap.dp().ProxyListener(h.NetnsCookie, h.To, 6) {
		ls, err := proxyListeners(h)
		if err != nil {
			ap.c.Log().Warn("inbound proxy redirect: the proxy's listener is not in the map; connections are refused until it listens again", "port", h.Port, "to", h.To, "err", err)
		}
		for _, l := range ls {
			if err := ap.dp().PutProxyListener(h.NetnsCookie, h.To, l.Family, int(l.File.Fd())); err != nil {
				ap.c.Log().Warn("inbound proxy redirect: put the proxy's listener", "port", h.Port, "err", err)
			}
		}
		closeListeners(ls)
	}
	return ap.dp().AttachProxyIn(netnsPath(h), h.NetnsCookie)
}
