package bgp

import (
	"net/netip"
	"time"
)

// Retry pacing. GoBGP retries a session that does not come up every
// connect-retry interval (Config.ConnectRetry, 5 s, jittered) and, after
// an attempt that ended in a NOTIFICATION (a wrong AS, a refused OPEN),
// after its 5 s idle hold time, forever at that pace. The speaker gives
// each peer a try window of tryWindow (room for GoBGP's idle hold, two
// connects, an OPEN exchange) and, when the session is not up by then,
// pauses the peer (GoBGP's admin down: no connection attempts) for a
// backoff that doubles from Config.ConnectRetry up to maxBackoff, then
// lets it try again. An established session resets the backoff; a
// session lost after being up gets a fresh window at once.
const (
	tryWindow  = 15 * time.Second
	maxBackoff = 2 * time.Minute
)

// retrier is the pacing state of every peer (under Speaker.mu).
type retrier struct {
	first time.Duration // the first pause (Config.ConnectRetry)
	peers map[netip.Addr]*retryState
}

type retryState struct {
	up       bool
	since    time.Time // the current try window's start
	paused   bool
	until    time.Time // the pause's end
	failures int       // windows in a row that ended without a session
}

func newRetrier(first time.Duration) retrier {
	return retrier{first: first, peers: map[netip.Addr]*retryState{}}
}

// add starts a peer's first try window.
func (r *retrier) add(a netip.Addr, now time.Time) {
	r.peers[a] = &retryState{since: now}
}

func (r *retrier) remove(a netip.Addr) { delete(r.peers, a) }

// observe records a session's state: up resets the backoff, a session
// lost starts a new window.
func (r *retrier) observe(a netip.Addr, up bool, now time.Time) {
	p := r.peers[a]
	if p == nil {
		return
	}
	if up {
		p.failures = 0
	} else if p.up {
		p.since = now
	}
	p.up = up
}

// backoff is the pause after n windows in a row without a session.
func (r *retrier) backoff(n int) time.Duration {
	d := r.first
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// step says which peers to pause (their window ended without a session)
// and which to let try again (their pause ended), now.
func (r *retrier) step(now time.Time) (pause, resume []netip.Addr) {
	for a, p := range r.peers {
		switch {
		case p.up:
		case p.paused && !now.Before(p.until):
			p.paused, p.since = false, now
			resume = append(resume, a)
		case !p.paused && now.Sub(p.since) >= tryWindow:
			p.failures++
			p.paused, p.until = true, now.Add(r.backoff(p.failures))
			pause = append(pause, a)
		}
	}
	return pause, resume
}

// retryAt is when a paused peer tries again (zero: not paused).
func (r *retrier) retryAt(a netip.Addr) time.Time {
	if p := r.peers[a]; p != nil && p.paused {
		return p.until
	}
	return time.Time{}
}

// resume ends a pause the speaker did not act on (the session was up).
func (r *retrier) resume(a netip.Addr, now time.Time) {
	if p := r.peers[a]; p != nil {
		p.paused, p.since = false, now
	}
}
