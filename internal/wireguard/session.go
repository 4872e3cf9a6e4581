package wireguard

import (
	"fmt"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Sessions: whether each peer has a working WireGuard session, and what
// the datapath does with its pods' traffic when it has not (xlaned
// --encryption-strict, docs/encryption.md "Strict mode and fallback").
//
// A session works while its last handshake is under 180 s old
// (WireGuard's Reject-After-Time; persistent keepalives make one every
// 2 minutes on an idle peer) and newer than this node's key (a rotation
// voids the sessions made with the old one). A peer just set (new, or
// its key or endpoint changed) has a grace of handshakeGrace to make its
// first: its traffic goes into WireGuard meanwhile (queued there, never
// in cleartext). After that a peer without a working session is
// unencrypted: with --encryption-strict its pods' packets are dropped by
// the datapath and counted (drop_unencrypted); without, they fall back to
// the overlay in cleartext (VXLAN to the peer's underlay address) and
// status and the metrics say so. Either way the daemon nudges WireGuard
// every nudgeInterval (a keepalive, which starts a handshake): neither
// dropped nor cleartext traffic reaches the device any more, and
// WireGuard gives up its own retries after 90 s.

// Session states (api.EncryptionPeer.State).
const (
	StateEncrypted = "encrypted" // a working session: the traffic goes through WireGuard
	StatePending   = "pending"   // no session yet, within the grace: the traffic waits in WireGuard
	StateDropped   = "dropped"   // no working session, strict: drop_unencrypted
	StateCleartext = "cleartext" // no working session, not strict: the overlay in cleartext
)

// Reasons a peer is not encrypted (api.EncryptionPeer.Reason, the
// metrics' reason label) and what they mean (Detail).
const (
	ReasonNoHandshake = "no_handshake"
	ReasonStale       = "session_expired"
	ReasonMissing     = "not_on_device"
)

var reasonDetail = map[string]string{
	ReasonNoHandshake: "no handshake yet: the peer does not answer (wrong key or port, its WireGuard down, UDP blocked?)",
	ReasonStale:       "session expired: no handshake for 180 s (the peer stopped answering)",
	ReasonMissing:     "not on the WireGuard device",
}

const (
	// handshakeGrace is how long a peer just set may take for its first
	// handshake (WireGuard retries after 5 s: one retry).
	handshakeGrace = 6 * time.Second
	// nudgeInterval is how often an unencrypted peer is sent a keepalive
	// (WireGuard's own handshake retry interval).
	nudgeInterval = 5 * time.Second
)

// session is the daemon's view of a peer's WireGuard session.
type session struct {
	since  time.Time // the peer's key or endpoint set: its grace starts
	state  string    // the last Check's verdict (State*)
	reason string    // why not encrypted (Reason*; "" when encrypted)
	// course is how the caller was last told to send the peer's traffic
	// (through: wg, dropped, cleartext): Check reports a change of it.
	course string
	nudged time.Time
}

// verdict reads a peer's session from the device's view of it (ok false:
// not on the device) at now.
func (t *Tunnel) verdict(s *session, live wgtypes.Peer, ok bool, now time.Time) (state, reason string) {
	hs := live.LastHandshakeTime
	switch {
	case !ok:
		reason = ReasonMissing
	case !hs.IsZero() && hs.After(t.keyed) && now.Sub(hs) < handshakeStale:
		return StateEncrypted, ""
	case hs.IsZero() || !hs.After(t.keyed):
		reason = ReasonNoHandshake
	default:
		reason = ReasonStale
	}
	if now.Sub(s.since) < handshakeGrace && reason != ReasonStale {
		return StatePending, reason
	}
	if t.cfg.Strict {
		return StateDropped, reason
	}
	return StateCleartext, reason
}

// Check reads every peer's session at now and returns the nodes whose
// traffic changes course (into WireGuard, dropped, cleartext): the caller
// rewrites their datapath entries (Encrypts says how). Peers without a
// working session are nudged.
func (t *Tunnel) Check(now time.Time) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dev, err := t.eng.device()
	if err != nil {
		return nil, err
	}
	live := map[Key]wgtypes.Peer{}
	for _, p := range dev.Peers {
		live[p.PublicKey] = p
	}
	var changed []string
	for name, p := range t.peers {
		s := t.session(name)
		l, ok := live[p.PublicKey]
		state, reason := t.verdict(s, l, ok, now)
		if through(state) != s.course {
			s.course = through(state)
			changed = append(changed, name)
		}
		if state != s.state {
			t.cfg.Log.Info("encryption: peer session", "node", name, "state", state, "was", s.state, "reason", reason)
		}
		s.state, s.reason = state, reason
		if state != StateEncrypted && ok && now.Sub(s.nudged) >= nudgeInterval {
			s.nudged = now
			t.nudge(p.PublicKey)
		}
	}
	return changed, nil
}

// through says how the datapath sends a peer's traffic in a state:
// "wg" into WireGuard, or the state itself (dropped, cleartext).
func through(state string) string {
	if state == StateDropped || state == StateCleartext {
		return state
	}
	return "wg"
}

// session is node's, made pending (now) if it has none. t.mu held.
func (t *Tunnel) session(node string) *session {
	if t.sess[node] == nil {
		t.resetSession(node, time.Now())
	}
	return t.sess[node]
}

// nudge sends the peer a keepalive (its persistent keepalive off and on
// again: both engines send one when it turns on), which starts a
// handshake where there is no session. t.mu held.
func (t *Tunnel) nudge(k Key) {
	off, on := time.Duration(0), Keepalive
	for _, d := range []*time.Duration{&off, &on} {
		err := t.eng.configure(wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: k, UpdateOnly: true, PersistentKeepaliveInterval: d}}})
		if err != nil {
			t.cfg.Log.Warn("encryption: nudge a peer's handshake", "err", err)
			return
		}
	}
}

// Encrypts says how node's traffic goes (the course the last Check
// reported): through WireGuard (true), or not: dropped (strict) or in
// cleartext. An unknown node goes through WireGuard.
func (t *Tunnel) Encrypts(node string) (through bool, strict bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sess[node]
	return s == nil || s.course == "wg", t.cfg.Strict
}

// Strict: --encryption-strict.
func (t *Tunnel) Strict() bool { return t.cfg.Strict }

// resetSession starts node's grace again (a new key or endpoint, a new
// key of this node's); the course its traffic takes stays until the next
// Check. t.mu held.
func (t *Tunnel) resetSession(node string, now time.Time) {
	course := "wg" // a new peer's traffic goes into WireGuard
	if old := t.sess[node]; old != nil {
		course = old.course
	}
	t.sess[node] = &session{since: now, state: StatePending, reason: ReasonNoHandshake, course: course}
}

// SetPrivateKey replaces this node's key pair (key rotation): the device
// takes the new private key, which voids every session (both engines
// expire the old key's): each peer gets a new grace to handshake with the
// new key, once it has learnt it (its traffic waits in WireGuard
// meanwhile). Failing, nothing changed.
func (t *Tunnel) SetPrivateKey(priv Key) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.eng.configure(wgtypes.Config{PrivateKey: &priv}); err != nil {
		return fmt.Errorf("set %s private key: %w", Device, err)
	}
	now := time.Now()
	t.pub, t.keyed = priv.PublicKey(), now
	for name := range t.peers {
		t.resetSession(name, now)
	}
	return nil
}
