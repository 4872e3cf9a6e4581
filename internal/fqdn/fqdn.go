package fqdn

import (
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/ktime"
	"github.com/xlane-dev/xlane/internal/store"
)

// Rule is a firewall rule with names, as the firewall compiled it.
type Rule struct {
	Slot  uint32 // its counter slot: xlane_fw_resolved's key
	Name  string
	Names []string       // patterns (ValidName)
	Src   []netip.Prefix // the sources it applies to; nil: any
}

// Map is xlane_fw_resolved (internal/firewall's ResolvedMap). expires is
// CLOCK_MONOTONIC nanoseconds, as bpf_ktime_get_ns reads it.
type Map interface {
	Put(slot uint32, src, dst netip.Addr, expires uint64) error
	Delete(slot uint32, src, dst netip.Addr) error
	Range(fn func(slot uint32, src, dst netip.Addr, expires uint64)) error
}

// How often the endpoints are looked at again (taps opened and closed),
// and how often expired entries are removed from the map.
const (
	syncInterval  = time.Second
	sweepInterval = 10 * time.Second
)

// FQDN follows the endpoints' DNS while the firewall has rules with
// names, and keeps xlane_fw_resolved to their answers.
type FQDN struct {
	log   *slog.Logger
	m     Map
	store *store.Store

	mu    sync.Mutex
	rules []Rule
	eps   map[string]*epTap // endpoint id ->
	stats map[string]uint64
	kick  chan struct{}
	// refused: answers_unmatched when sweep last looked (it logs growth).
	refused uint64
}

// epTap is one endpoint's tap and tracker.
type epTap struct {
	id, netns, ifname, mac string
	gw                     net.HardwareAddr // the host side's MAC: the endpoint's gateway
	t                      *tracker
	fd, ifindex            int
	closed                 atomic.Bool // the reader closes fd and ends
}

// Start starts following endpoints for the rules SetRules hands over
// (none at first: no tap is open), until c is done.
func Start(c core.Core, m Map) *FQDN {
	f := &FQDN{log: c.Log(), m: m, store: c.Store(), eps: map[string]*epTap{}, stats: map[string]uint64{}, kick: make(chan struct{}, 1)}
	go f.run(c.Done())
	return f
}

// SetRules is the firewall's hook: the rules with names of the set just
// installed. What endpoints resolved before is applied to them at once.
func (f *FQDN) SetRules(rules []Rule) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.rules = rules
	now := time.Now()
	for _, e := range f.eps {
		e.t.expire(now)
		for name, m := range e.t.names {
			f.put(e.t, name, m)
		}
	}
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Stats counts the DNS packets seen by verdict, and the entries written.
func (f *FQDN) Stats() map[string]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]uint64{}
	for k, v := range f.stats {
		out[k] = v
	}
	return out
}

func (f *FQDN) run(done <-chan struct{}) {
	tick := time.NewTicker(syncInterval)
	defer tick.Stop()
	lastSweep := time.Now()
	for {
		select {
		case <-done:
			f.mu.Lock()
			for id := range f.eps {
				f.closeTap(id)
			}
			f.mu.Unlock()
			return
		case <-tick.C:
		case <-f.kick:
		}
		f.syncTaps()
		if time.Since(lastSweep) >= sweepInterval {
			f.sweep()
			lastSweep = time.Now()
		}
	}
}

// syncTaps opens a tap for every endpoint in a namespace while there are
// rules, and closes those of endpoints gone (all of them without rules).
func (f *FQDN) syncTaps() {
	f.mu.Lock()
	on := len(f.rules) > 0
	f.mu.Unlock()
	want := map[string]*epTap{}
	if on {
		err := f.store.View(func(tx *store.Tx) error {
			eps, err := tx.Endpoints()
			if err != nil {
				return err
			}
			// A Docker container's endpoint is veth-only: Docker moved
			// its interface into the sandbox its Join named.
			sandbox := map[string]string{}
			des, err := tx.DockerEndpoints()
			for _, de := range des {
				sandbox[de.ID] = de.SandboxKey
			}
			for _, e := range eps {
				netns := e.Netns
				if netns == "" {
					netns = sandbox[e.ID]
				}
				if netns != "" && !e.VM {
					gw, _ := net.ParseMAC(e.HostMAC)
					want[e.ID] = &epTap{id: e.ID, netns: netns, ifname: e.IfName, mac: e.MAC, gw: gw, t: newTracker(slices.Clone(e.IPs))}
				}
			}
			return err
		})
		if err != nil {
			f.log.Warn("fqdn: list endpoints", "err", err)
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, e := range f.eps {
		if w, ok := want[id]; !ok || w.netns != e.netns || w.ifname != e.ifname {
			f.closeTap(id)
		} else if !slices.Equal(w.t.addrs, e.t.addrs) {
			e.t.addrs = w.t.addrs
		}
	}
	for id, w := range want {
		if _, ok := f.eps[id]; ok {
			continue
		}
		fd, ifindex, err := openTap(w.netns, w.ifname, w.mac)
		if err != nil {
			// The endpoint's namespace may be going away: tried again
			// next time.
			f.log.Debug("fqdn: tap", "endpoint", id, "err", err)
			continue
		}
		w.fd, w.ifindex = fd, ifindex
		f.eps[id] = w
		go f.read(w)
	}
}

// closeTap closes an endpoint's tap (its reader ends). Called with f.mu.
func (f *FQDN) closeTap(id string) {
	if e := f.eps[id]; e != nil {
		e.closed.Store(true)
		delete(f.eps, id)
	}
}

// read handles the packets of an endpoint's tap until it is closed, then
// closes it. It runs on a thread of its own at nice -20: the endpoint
// reads the same answer from its socket and may connect at once, and the
// entry must be in the map before its SYN (docs/firewall.md, "Race"); the
// work per packet is bounded (a parse, a map update per rule and
// address), and only DNS packets of endpoints under rules with names come.
func (f *FQDN) read(e *epTap) {
	runtime.LockOSThread() // never unlocked: the thread ends with the reader
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -20)
	defer unix.Close(e.fd)
	buf, oob := make([]byte, 65536), make([]byte, 128)
	for !e.closed.Load() {
		n, at, err := recvTap(e.fd, buf, oob)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue // the receive timeout: look at closed
			}
			return
		}
		if src, dst, ok := parseSYN(buf[:n]); ok {
			f.replaySYN(e, src, dst, at, buf[:n])
			continue
		}
		f.mu.Lock()
		a, verdict := e.t.observe(buf[:n], time.Now())
		f.stats[verdict]++
		switch verdict {
		case seenAnswer:
			f.log.Debug("fqdn: answer", "endpoint", e.id, "name", a.name, "addrs", a.addrs, "ttl", a.ttl)
			f.put(e.t, a.name, e.t.names[a.name])
			now := time.Now()
			for _, src := range e.t.addrs {
				for _, dst := range a.fresh {
					e.t.written[[2]netip.Addr{src, dst}] = now
				}
			}
		case seenUnsolicited:
			f.log.Debug("fqdn: answer refused: no query of the endpoint's matches it", "endpoint", e.id)
		}
		f.mu.Unlock()
	}
}

// replaySYN sends again a SYN the endpoint sent to an address it had just
// resolved, before the address's entry was written (at, the kernel's time
// of the SYN, before it, by less than a second): the datapath dropped it,
// and the client would retransmit it only a second later. The copy goes
// out of the endpoint's device to its gateway as the endpoint sent it,
// through the datapath again, now with the entry.
func (f *FQDN) replaySYN(e *epTap, src, dst netip.Addr, at time.Time, packet []byte) {
	f.mu.Lock()
	w, ok := e.t.written[[2]netip.Addr{src, dst}]
	replay := ok && at.Before(w) && w.Sub(at) < time.Second && slices.Contains(e.t.addrs, src) && e.gw != nil
	if replay {
		f.stats["syn_replayed"]++
	}
	f.mu.Unlock()
	if !replay {
		return
	}
	if !fixTCPChecksum(packet) {
		return
	}
	if err := sendTap(e.fd, e.ifindex, e.gw, packet); err != nil {
		f.log.Warn("fqdn: replay SYN", "endpoint", e.id, "dst", dst, "err", err)
		return
	}
	f.log.Info("fqdn: SYN sent before its destination's entry replayed", "endpoint", e.id, "src", src, "dst", dst, "early", w.Sub(at))
}

// put writes the entries of the rules whose names match name: for each
// of the endpoint's addresses the rule applies to, each address of the
// answer of the same family, until its TTL ends. Called with f.mu.
func (f *FQDN) put(t *tracker, name string, addrs map[netip.Addr]time.Time) {
	if len(addrs) == 0 {
		return
	}
	mono, now := ktime.Now(), time.Now()
	for _, r := range f.rules {
		if !slices.ContainsFunc(r.Names, func(p string) bool { return Match(p, name) }) {
			continue
		}
		for _, src := range t.addrs {
			if r.Src != nil && !slices.ContainsFunc(r.Src, func(p netip.Prefix) bool { return p.Contains(src) }) {
				continue
			}
			for dst, until := range addrs {
				if dst.Is4() != src.Is4() || !until.After(now) {
					continue
				}
				if err := f.m.Put(r.Slot, src, dst, mono+uint64(until.Sub(now))); err != nil {
					f.log.Warn("fqdn: write resolved address", "rule", r.Name, "src", src, "dst", dst, "err", err)
					continue
				}
				f.stats["entries_written"]++
			}
		}
	}
}

// sweep removes the map's entries whose TTL ended or whose rule is gone.
func (f *FQDN) sweep() {
	f.mu.Lock()
	slots := map[uint32]bool{}
	for _, r := range f.rules {
		slots[r.Slot] = true
	}
	for _, e := range f.eps {
		e.t.expire(time.Now())
	}
	if n := f.stats[seenUnsolicited]; n > f.refused {
		f.log.Warn("fqdn: DNS answers refused: no query of the endpoint's matched them (id, port, server, question): forged, or late", "count", n-f.refused)
		f.refused = n
	}
	f.mu.Unlock()
	type key struct {
		slot     uint32
		src, dst netip.Addr
	}
	var stale []key
	now := ktime.Now()
	err := f.m.Range(func(slot uint32, src, dst netip.Addr, expires uint64) {
		if !slots[slot] || expires <= now {
			stale = append(stale, key{slot, src, dst})
		}
	})
	if err != nil {
		f.log.Warn("fqdn: read resolved addresses", "err", err)
	}
	for _, k := range stale {
		if err := f.m.Delete(k.slot, k.src, k.dst); err != nil {
			f.log.Debug("fqdn: remove resolved address", "err", err)
		}
	}
}
