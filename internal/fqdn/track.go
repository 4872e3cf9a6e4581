package fqdn

import (
	"net/netip"
	"slices"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The bounds of an answer's TTL: an address is allowed for the answer's
// TTL, at least MinTTL (a TTL of 0 or 1 s would end before the endpoint
// connects) and at most MaxTTL (an address stays allowed no longer than
// an hour after the endpoint last resolved it).
const (
	MinTTL = 5 * time.Second
	MaxTTL = time.Hour
)

// Limits of the state kept per endpoint.
const (
	queryTimeout = 10 * time.Second // a query unanswered this long is forgotten
	maxPending   = 256              // queries awaiting an answer
	maxNames     = 4096             // names with live answers
)

// Verdicts of an observed packet, counted per kind (Stats).
const (
	seenQuery       = "query"
	seenAnswer      = "answer"           // accepted
	seenUnsolicited = "answer_unmatched" // no query of the endpoint's with its id, port, server and question
	seenTooMany     = "query_dropped"    // maxPending queries pending already
	seenOther       = "ignored"          // not a query from nor an answer to the endpoint
)

// pendKey is a query as its answer must match it: the endpoint's port,
// the server it was sent to, the id.
type pendKey struct {
	port   uint16
	server netip.Addr
	id     uint16
}

type pending struct {
	name string
	typ  dnsmessage.Type
	at   time.Time
}

// tracker is one endpoint's DNS as seen on its interface: its pending
// queries and the addresses its accepted answers gave, per name, each
// until its TTL ends.
type tracker struct {
	addrs   []netip.Addr // the endpoint's
	pending map[pendKey]pending
	names   map[string]map[netip.Addr]time.Time
	// written: when the entries of a (source, destination) the endpoint
	// had no live answer for were written, for replaySYN (kept 2 s).
	written map[[2]netip.Addr]time.Time
}

func newTracker(addrs []netip.Addr) *tracker {
	return &tracker{addrs: addrs, pending: map[pendKey]pending{}, names: map[string]map[netip.Addr]time.Time{},
		written: map[[2]netip.Addr]time.Time{}}
}

// observe handles a packet the endpoint sent or received at now: a query
// is remembered; an answer that matches one is accepted (ok), its TTL
// bounded, and its addresses kept until then.
func (t *tracker) observe(b []byte, now time.Time) (a answer, verdict string) {
	u, ok := parseUDP(b)
	if !ok {
		return a, seenOther
	}
	own := func(x netip.Addr) bool { return slices.Contains(t.addrs, x.Unmap()) }
	switch {
	case u.dport == 53 && own(u.src):
		q, ok := parseQuery(u.payload)
		if !ok {
			return a, seenOther
		}
		if len(t.pending) >= maxPending {
			t.expire(now)
		}
		k := pendKey{u.sport, u.dst.Unmap(), q.id}
		if _, dup := t.pending[k]; !dup && len(t.pending) >= maxPending {
			return a, seenTooMany
		}
		t.pending[k] = pending{name: q.name, typ: q.typ, at: now}
		return a, seenQuery
	case u.sport == 53 && own(u.dst):
		ans, ok := parseAnswer(u.payload)
		k := pendKey{u.dport, u.src.Unmap(), ans.id}
		p, found := t.pending[k]
		if !ok {
			// An error, or no address: the query is answered.
			if q, qok := parseAnswerID(u.payload); qok {
				k.id = q
				if p, found := t.pending[k]; found && now.Sub(p.at) <= queryTimeout {
					delete(t.pending, k)
				}
			}
			return a, seenOther
		}
		if !found || p.name != ans.name || p.typ != ans.typ || now.Sub(p.at) > queryTimeout {
			return a, seenUnsolicited
		}
		delete(t.pending, k)
		ans.ttl = min(max(ans.ttl, MinTTL), MaxTTL)
		until := now.Add(ans.ttl)
		m := t.names[ans.name]
		if m == nil {
			if len(t.names) >= maxNames {
				t.expire(now)
			}
			if len(t.names) >= maxNames {
				return a, seenTooMany
			}
			m = map[netip.Addr]time.Time{}
			t.names[ans.name] = m
		}
		for _, x := range ans.addrs {
			if !m[x].After(now) {
				ans.fresh = append(ans.fresh, x)
			}
			if until.After(m[x]) {
				m[x] = until
			}
		}
		return ans, seenAnswer
	}
	return a, seenOther
}

// parseAnswerID reads the id of a DNS response.
func parseAnswerID(b []byte) (uint16, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	return h.ID, err == nil && h.Response
}

// expire forgets what ended before now.
func (t *tracker) expire(now time.Time) {
	for k, w := range t.written {
		if now.Sub(w) > 2*time.Second {
			delete(t.written, k)
		}
	}
	for k, p := range t.pending {
		if now.Sub(p.at) > queryTimeout {
			delete(t.pending, k)
		}
	}
	for n, m := range t.names {
		for x, until := range m {
			if !until.After(now) {
				delete(m, x)
			}
		}
		if len(m) == 0 {
			delete(t.names, n)
		}
	}
}
