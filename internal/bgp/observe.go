package bgp

import (
	"context"
	"net/netip"
	"strings"
	"time"

	gapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gbgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/metrics"
)

// The speaker's monitor events (Config.Events; `xlane monitor -t bgp`):
// Type "bgp", Action one of these, Peer or Prefix, Reason why.
const (
	EventUp        = "up"        // a session became established
	EventDown      = "down"      // an established session went down (Reason: why)
	EventFailed    = "failed"    // an attempt to establish a session failed (Reason: why; wrong AS, refused OPEN ...)
	EventAdvertise = "advertise" // a prefix announced to the peers (Reason: where it comes from)
	EventWithdraw  = "withdraw"  // a prefix withdrawn
	EventBackoff   = "backoff"   // a peer's attempts paused (Reason: why, and when it tries again)
)

// note is a NOTIFICATION GoBGP logged for a peer (tapHandler).
type note struct {
	peer netip.Addr
	why  string
}

// notification records a NOTIFICATION of a session that is not up (an
// attempt refused): the peer's last reason, and a failed event, once per
// try window.
func (s *Speaker) notification(a netip.Addr, why string) {
	s.mu.Lock()
	_, known := s.peers[a]
	if !known || s.established[a] {
		s.mu.Unlock()
		return // (an established session's end comes as a state change)
	}
	s.lastDown[a] = why
	first := !s.failNoted[a]
	s.failNoted[a] = true
	s.mu.Unlock()
	if first {
		s.log.Info("bgp session failed", "peer", a, "why", why)
		s.emit(api.MonitorEvent{Action: EventFailed, Peer: a.String(), Reason: why})
	}
}

// emit hands an event to Config.Events (a no-op without).
func (s *Speaker) emit(ev api.MonitorEvent) {
	if s.cfg.Events != nil {
		ev.Type = "bgp"
		s.cfg.Events(ev)
	}
}

// watchPeers reports the sessions' state changes (monitor events) and
// feeds the retry backoff, until ctx ends.
func (s *Speaker) watchPeers(ctx context.Context) error {
	return s.srv.WatchEvent(ctx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, at time.Time) {
			if ev.Type != apiutil.PEER_EVENT_STATE {
				return
			}
			st := ev.Peer.State
			s.peerState(st.NeighborAddress, st.SessionState == gbgp.BGP_FSM_ESTABLISHED, st.SessionState == gbgp.BGP_FSM_IDLE,
				downReason(st.DisconnectMessage), at)
		},
	}, server.WatchPeer())
}

// peerState records a session's state change and reports it: up, down
// (an established session lost), failed (an attempt ended in idle with a
// reason: a NOTIFICATION, a refused OPEN).
func (s *Speaker) peerState(addr netip.Addr, established, idle bool, why string, at time.Time) {
	s.mu.Lock()
	if _, known := s.peers[addr]; !known {
		s.mu.Unlock()
		return // removed (xlane bgp peer rm)
	}
	was := s.established[addr]
	s.established[addr] = established
	s.retry.observe(addr, established, at)
	noted := s.failNoted[addr]
	if established {
		s.failNoted[addr] = false
	}
	bfd := s.peers[addr].BFD && established != s.bfdOn[addr]
	s.mu.Unlock()
	if bfd {
		s.kickBFD(addr)
	}
	ev := api.MonitorEvent{Time: at, Peer: addr.String(), Reason: why}
	switch {
	case established && !was:
		ev.Action, ev.Reason = EventUp, ""
	case was && !established:
		ev.Action = EventDown
	case idle && why != "" && why != "admin down" && !noted: // (admin down: the retrier's pause)
		ev.Action = EventFailed
		s.mu.Lock()
		s.failNoted[addr] = true
		s.mu.Unlock()
	default:
		return
	}
	if ev.Action == EventUp {
		s.log.Info("bgp session up", "peer", addr)
	} else {
		if why != "" {
			s.mu.Lock()
			s.lastDown[addr] = why
			s.mu.Unlock()
		}
		s.log.Info("bgp session "+ev.Action, "peer", addr, "why", why)
	}
	s.emit(ev)
}

// downReason words GoBGP's reason a session went down or failed
// ("hold-timer-expired", "notification-received cease ...").
func downReason(msg string) string {
	switch msg {
	case "", "unknown":
		return ""
	case "bad-peer-as":
		return "bad peer AS: the peer's OPEN has another AS number than its --asn"
	}
	return strings.ReplaceAll(msg, "-", " ")
}

// livePeers are GoBGP's view of the sessions, by address.
func (s *Speaker) livePeers() (map[netip.Addr]*gapi.Peer, error) {
	live := map[netip.Addr]*gapi.Peer{}
	err := s.srv.ListPeer(context.Background(), &gapi.ListPeerRequest{EnableAdvertised: true}, func(p *gapi.Peer) {
		if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
			live[a] = p
		}
	})
	return live, err
}

// Metrics adds the speaker's part to a metrics snapshot (nil speaker:
// nothing): per peer of the store, its session's state, uptime, flaps and
// prefixes, and the count of announced routes.
func (s *Speaker) Metrics(snap *metrics.Snapshot) {
	if s == nil {
		return
	}
	peers, err := s.peerStatuses()
	if err != nil {
		if snap.Errors == nil {
			snap.Errors = map[string]error{}
		}
		snap.Errors["bgp"] = err
		return
	}
	s.mu.Lock()
	out := &metrics.BGP{Announced: len(s.announced)}
	s.mu.Unlock()
	for _, p := range peers {
		out.Peers = append(out.Peers, metrics.BGPPeer{Peer: p.Address.String(), Established: p.State == "established",
			Uptime: time.Duration(p.Uptime) * time.Second, Flaps: p.Flaps, Sent: p.Sent, Received: p.Received, Accepted: p.Accepted})
	}
	snap.BGP = out
}

// bfdState names a BFD session state ("" without BFD).
func bfdState(s gapi.BfdSessionState) string {
	switch s {
	case gapi.BfdSessionState_BFD_SESSION_STATE_UP:
		return "up"
	case gapi.BfdSessionState_BFD_SESSION_STATE_DOWN:
		return "down"
	case gapi.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
		return "admin-down"
	case gapi.BfdSessionState_BFD_SESSION_STATE_INIT:
		return "init"
	}
	return ""
}
