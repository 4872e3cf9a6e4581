package bgp

import (
	"context"
	"net/netip"

	gapi "github.com/osrg/gobgp/v4/api"
)

// BFD (xlane bgp peer add --bfd) runs GoBGP's BFD (RFC 5880/5881, single
// hop, asynchronous mode, 1 s x 3, no echo) for a peer only while its BGP
// session is established: bfdSync turns it on when the session comes up
// and off when it goes down.
//
// Why not from the start, as GoBGP would: a router's BFD session for a BGP
// neighbor is not final until the BGP session is up. FRR's bgpd registers
// the BFD session with bfdd without a source address (it does not know it
// yet, unless `neighbor X update-source` names it) and, when the BGP
// session is established, replaces it by one with the session's local
// address and interface: bfdd deletes the first session (its last packet
// says Down, diagnostic "neighbor signaled session down") and starts a new
// one, with a new discriminator, in Down. GoBGP's BFD, already up with the
// first session, took that Down as the neighbor's failure and reset the
// BGP session (a Cease, "BFD is down") 2 ms after it came up; or, still in
// Init with the first session's discriminator, it dropped every packet of
// the new one as a wrong discriminator and expired 3 s later, resetting the
// session the same way. Each reset made FRR register anew without a
// source, so the next establishment did the same (TestBGPBFD). Started
// once the session is up, GoBGP's BFD meets only the router's final
// session.
//
// What BFD changes: a lost peer (link, power) is noticed in the detection
// time (3 x 1 s; the router's side the same, GoBGP's 1 s being the slower
// interval), not the hold time. The BFD session lives in xlaned's process
// (the C bit is clear), so a kill -9 of xlaned takes BFD down too and FRR
// ends the BGP session then; it still keeps the routes as stale (graceful
// restart), as TestBGPBFD checks.
func (s *Speaker) bfdSync(a netip.Addr) {
	s.mu.Lock()
	p, known := s.peers[a]
	want := known && p.BFD && s.established[a]
	on := s.bfdOn[a]
	s.mu.Unlock()
	if !known || want == on {
		return
	}
	// UpdatePeer changes only GoBGP's BFD for the peer: no new OPEN, the
	// session stays.
	if _, err := s.srv.UpdatePeer(context.Background(), &gapi.UpdatePeerRequest{Peer: s.peerConf(&p, want)}); err != nil {
		s.log.Warn("bgp: bfd", "peer", a, "on", want, "err", err)
		return
	}
	s.mu.Lock()
	if _, still := s.peers[a]; still {
		s.bfdOn[a] = want
	}
	s.mu.Unlock()
	s.log.Info("bgp: bfd", "peer", a, "on", want)
}

// kickBFD asks retryLoop to run bfdSync for a (never blocks; a full queue
// drops the kick, the next state change brings another).
func (s *Speaker) kickBFD(a netip.Addr) {
	select {
	case s.bfdKick <- a:
	default:
	}
}
