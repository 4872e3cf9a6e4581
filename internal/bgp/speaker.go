package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	gapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gbgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// restartDeferral is how long (s) a restarted speaker holds back its
// routes from an established session while other peers have not sent
// End-of-RIB (peerConf).
const restartDeferral = 1

// idleHoldAfterReset is how long (s) GoBGP waits before it tries a
// session again that it reset itself (peerConf).
const idleHoldAfterReset = 1

// Stop modes: what a stop of xlaned does to its routes.
const (
	// StopGraceful closes the sessions without a NOTIFICATION: peers
	// that negotiated graceful restart keep the routes for the restart
	// time (the datapath keeps serving while xlaned is down), and a
	// restarted xlaned refreshes them.
	StopGraceful = "graceful"
	// StopWithdraw ends every session with a Cease NOTIFICATION: peers
	// drop the routes at once (a node taken out of service).
	StopWithdraw = "withdraw"
)

// Advertise is what the speaker announces (Desired).
type Advertise struct {
	PodCIDRs       bool
	PodCommunities []uint32
	LoadBalancer   bool
	ServiceCIDRs   []netip.Prefix
}

// Config is the speaker's configuration (xlaned's --bgp-* flags).
type Config struct {
	ASN      uint32
	RouterID netip.Addr
	// ListenPort is the TCP port the speaker accepts sessions on (0: it
	// only connects out).
	ListenPort int
	// RestartTime is the graceful restart time announced to peers: how
	// long they keep this node's routes after its sessions drop without
	// a NOTIFICATION (0: graceful restart off).
	RestartTime time.Duration
	// ConnectRetry is the wait between connection attempts to a peer
	// that does not answer.
	ConnectRetry time.Duration
	Stop         string
	Advertise    Advertise
	// InstallRoutes puts the best paths learned from the peers into the
	// kernel's main table (proto bgp): native routing across segments.
	InstallRoutes bool
	// Events receives the speaker's monitor events (type bgp: sessions
	// up, down, failed; prefixes advertised, withdrawn); nil: none.
	Events func(api.MonitorEvent)
}

// Validate checks the configuration; errors name the flag.
func (c *Config) Validate() error {
	if err := model.CheckASN("bgp-asn", c.ASN); err != nil {
		return err
	}
	if !c.RouterID.Is4() || c.RouterID.IsUnspecified() {
		return model.Fieldf("bgp-router-id", "%q: want a non-zero IPv4 address (the speaker's 32-bit identifier)", c.RouterID)
	}
	if c.ListenPort < 0 || c.ListenPort > 65535 {
		return model.Fieldf("bgp-listen-port", "%d: want 0 (connect out only) or 1-65535", c.ListenPort)
	}
	if c.RestartTime < 0 || c.RestartTime > 4095*time.Second {
		return model.Fieldf("bgp-restart-time", "%s: want 0 (off) to 4095s", c.RestartTime)
	}
	if c.Stop != StopGraceful && c.Stop != StopWithdraw {
		return model.Fieldf("bgp-stop", "%q: want graceful or withdraw", c.Stop)
	}
	for _, p := range c.Advertise.ServiceCIDRs {
		if !p.IsValid() || p != p.Masked() {
			return model.Fieldf("bgp-advertise-service-cidr", "%q: want a prefix without host bits", p)
		}
	}
	return nil
}

// Speaker is xlaned's BGP speaker: an embedded GoBGP server whose peers
// come from the store and whose announcements follow the store (Desired),
// resynced after every committed change.
type Speaker struct {
	c   core.Core
	cfg Config
	log *slog.Logger
	srv *server.BgpServer

	kick  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
	watch context.CancelFunc // ends watchPeers

	mu          sync.Mutex
	announced   map[netip.Prefix]Announcement
	peers       map[netip.Addr]model.BGPPeer // as configured in the server
	established map[netip.Addr]bool          // the sessions' last state (watchPeers)
	lastDown    map[netip.Addr]string        // why each last went down or failed (not the retrier's pauses)
	failNoted   map[netip.Addr]bool          // a failed event went out in this try window
	bfdOn       map[netip.Addr]bool          // GoBGP's BFD runs for the peer (bfdSync)
	bfdKick     chan netip.Addr              // a session of a --bfd peer went up or down
	notes       chan note                    // the NOTIFICATIONs GoBGP logged (tapHandler)
	retry       retrier
	lastErr     error
	synced      chan struct{} // closed after the first sync
}

// New starts the speaker: the GoBGP server, the first sync (announcements
// first, then the sessions, so that a restarted xlaned's first update
// already holds every route and the peers' stale ones are refreshed, not
// dropped), and the loop that resyncs after every store commit.
func New(c core.Core, cfg Config) (*Speaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ConnectRetry == 0 {
		cfg.ConnectRetry = 5 * time.Second
	}
	lvl := &slog.LevelVar{}
	lvl.Set(slog.LevelWarn)
	log := c.Log().With("part", "bgp")
	s := &Speaker{c: c, cfg: cfg, log: log, kick: make(chan struct{}, 1), done: make(chan struct{}),
		announced: map[netip.Prefix]Announcement{}, peers: map[netip.Addr]model.BGPPeer{}, synced: make(chan struct{}),
		established: map[netip.Addr]bool{}, lastDown: map[netip.Addr]string{}, failNoted: map[netip.Addr]bool{},
		bfdOn: map[netip.Addr]bool{}, bfdKick: make(chan netip.Addr, 64),
		notes: make(chan note, 64), retry: newRetrier(cfg.ConnectRetry)}
	tap := &tapHandler{Handler: log.Handler(), note: func(a netip.Addr, why string) {
		select {
		case s.notes <- note{a, why}:
		default: // (never block GoBGP)
		}
	}}
	s.srv = server.NewBgpServer(server.LoggerOption(slog.New(tap), lvl))
	go s.srv.Serve()
	listen := int32(cfg.ListenPort)
	if listen == 0 {
		listen = -1
	}
	err := s.srv.StartBgp(context.Background(), &gapi.StartBgpRequest{Global: &gapi.Global{
		Asn: cfg.ASN, RouterId: cfg.RouterID.String(), ListenPort: listen,
	}})
	if err != nil {
		s.srv.Stop()
		return nil, fmt.Errorf("start bgp: %w", err)
	}
	var wctx context.Context
	wctx, s.watch = context.WithCancel(context.Background())
	if err := s.watchPeers(wctx); err != nil {
		s.watch()
		s.srv.Stop()
		return nil, fmt.Errorf("start bgp: watch sessions: %w", err)
	}
	c.Store().OnCommit(s.Kick)
	s.wg.Add(2)
	go s.loop()
	go s.retryLoop()
	s.Kick()
	if cfg.InstallRoutes {
		s.wg.Add(1)
		go s.installLoop()
	}
	return s, nil
}

// Kick asks for a resync (never blocks).
func (s *Speaker) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// loop resyncs on every kick, and every 30 s (what nothing kicked: a peer
// whose configuration the server refused is retried).
func (s *Speaker) loop() {
	defer s.wg.Done()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	first := true
	for {
		select {
		case <-s.done:
			return
		case <-s.c.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
		err := s.sync()
		s.mu.Lock()
		if err != nil && (s.lastErr == nil || s.lastErr.Error() != err.Error()) {
			s.log.Warn("bgp sync", "err", err)
		}
		s.lastErr = err
		s.mu.Unlock()
		if first {
			first = false
			close(s.synced)
		}
	}
}

// Synced waits for the first sync (tests; status).
func (s *Speaker) Synced() <-chan struct{} { return s.synced }

// sync makes the server's paths and peers match the store.
func (s *Speaker) sync() error {
	var st State
	var peers []model.BGPPeer
	err := s.c.Store().View(func(tx *store.Tx) error {
		var err error
		if st.Nodes, err = tx.Nodes(); err != nil {
			return err
		}
		if st.Networks, err = tx.Networks(); err != nil {
			return err
		}
		if st.Services, err = tx.Services(); err != nil {
			return err
		}
		if st.Pools, err = tx.LBPools(); err != nil {
			return err
		}
		peers, err = tx.BGPPeers()
		return err
	})
	if err != nil {
		return fmt.Errorf("read store: %w", err)
	}
	want := Desired(s.cfg.Advertise, st)
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	wantSet := make(map[netip.Prefix]bool, len(want))
	var add []*apiutil.Path
	var addA []Announcement
	for _, a := range want {
		wantSet[a.Prefix] = true
		if old, ok := s.announced[a.Prefix]; ok && old.equal(a) {
			s.announced[a.Prefix] = a // Why may change
			continue
		}
		p, err := path(a, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		add = append(add, p)
		addA = append(addA, a)
	}
	var del []*apiutil.Path
	var delP []netip.Prefix
	for pfx, a := range s.announced {
		if !wantSet[pfx] {
			p, err := path(a, true)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			del = append(del, p)
			delP = append(delP, pfx)
		}
	}
	if len(del) > 0 {
		if err := s.srv.DeletePath(apiutil.DeletePathRequest{Paths: del}); err != nil {
			errs = append(errs, fmt.Errorf("withdraw: %w", err))
		} else {
			for _, p := range delP {
				s.emit(api.MonitorEvent{Action: EventWithdraw, Prefix: p.String(), Reason: s.announced[p].Why})
				delete(s.announced, p)
			}
		}
	}
	if len(add) > 0 {
		resps, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: add})
		if err != nil && len(resps) == 0 {
			errs = append(errs, fmt.Errorf("announce: %w", err))
		} else {
			for i, a := range addA {
				if i < len(resps) && resps[i].Error != nil {
					errs = append(errs, fmt.Errorf("announce %s: %w", a.Prefix, resps[i].Error))
					continue
				}
				s.announced[a.Prefix] = a
				s.emit(api.MonitorEvent{Action: EventAdvertise, Prefix: a.Prefix.String(), Reason: a.Why})
			}
		}
	}
	// Sessions after the routes (New).
	wantPeers := map[netip.Addr]model.BGPPeer{}
	for _, p := range peers {
		wantPeers[p.Address] = p
	}
	for addr, p := range s.peers {
		if w, ok := wantPeers[addr]; ok && samePeer(w, p) {
			continue
		}
		if err := s.srv.DeletePeer(context.Background(), &gapi.DeletePeerRequest{Address: addr.String()}); err != nil {
			errs = append(errs, fmt.Errorf("remove peer %s: %w", addr, err))
			continue
		}
		delete(s.peers, addr)
		delete(s.established, addr)
		delete(s.lastDown, addr)
		delete(s.failNoted, addr)
		delete(s.bfdOn, addr)
		s.retry.remove(addr)
	}
	for addr, p := range wantPeers {
		if _, ok := s.peers[addr]; ok {
			continue
		}
		if err := s.srv.AddPeer(context.Background(), &gapi.AddPeerRequest{Peer: s.peerConf(&p, false)}); err != nil {
			errs = append(errs, fmt.Errorf("add peer %s: %w", addr, err))
			continue
		}
		s.peers[addr] = p
		s.retry.add(addr, time.Now())
	}
	for addr, p := range s.peers {
		if p.BFD && s.established[addr] != s.bfdOn[addr] {
			s.kickBFD(addr) // (a kick peerState dropped)
		}
	}
	return errors.Join(errs...)
}

func samePeer(a, b model.BGPPeer) bool {
	a.Created, b.Created = time.Time{}, time.Time{}
	return a == b
}

// path is a's GoBGP path: origin IGP, the next hop unspecified (GoBGP
// puts the session's local address there), communities and MED.
func path(a Announcement, withdraw bool) (*apiutil.Path, error) {
	nlri, err := gbgp.NewIPAddrPrefix(a.Prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix %s: %w", a.Prefix, err)
	}
	attrs := []gbgp.PathAttributeInterface{gbgp.NewPathAttributeOrigin(gbgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	family := gbgp.RF_IPv4_UC
	if a.Prefix.Addr().Is4() {
		nh, _ := gbgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		attrs = append(attrs, nh)
	} else {
		family = gbgp.RF_IPv6_UC
		mp, err := gbgp.NewPathAttributeMpReachNLRI(family, []gbgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return nil, fmt.Errorf("prefix %s: %w", a.Prefix, err)
		}
		attrs = append(attrs, mp)
	}
	if len(a.Communities) > 0 {
		attrs = append(attrs, gbgp.NewPathAttributeCommunities(a.Communities))
	}
	if a.MED != 0 {
		attrs = append(attrs, gbgp.NewPathAttributeMultiExitDisc(a.MED))
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs, Withdrawal: withdraw}, nil
}

// peerConf is p as GoBGP configures it: the family of its address,
// graceful restart (restarting speaker: the forwarding state is kept, the
// datapath outlives xlaned) unless RestartTime is 0, GoBGP's BFD when bfd
// (bfdSync turns it on once the session is up).
func (s *Speaker) peerConf(p *model.BGPPeer, bfd bool) *gapi.Peer {
	fam := &gapi.Family{Afi: gapi.Family_AFI_IP, Safi: gapi.Family_SAFI_UNICAST}
	if p.Address.Is6() {
		fam.Afi = gapi.Family_AFI_IP6
	}
	gr := s.cfg.RestartTime > 0
	hold := uint64(p.HoldTime)
	if hold == 0 {
		hold = 90
	}
	out := &gapi.Peer{
		Conf: &gapi.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, AuthPassword: p.Password,
			Description: "xlane"},
		// IdleHoldTimeAfterReset: after a session that GoBGP reset
		// itself (BFD down: a Cease, administrative reset) it waited
		// its default 30 s before trying again, and the retrier's
		// pauses restarted that wait every try window: such a session
		// never came back. 1 s, then the usual pacing.
		Timers: &gapi.Timers{Config: &gapi.TimersConfig{ConnectRetry: uint64(s.cfg.ConnectRetry / time.Second),
			HoldTime: hold, KeepaliveInterval: max(hold/3, 1), IdleHoldTimeAfterReset: idleHoldAfterReset}},
		AfiSafis: []*gapi.AfiSafi{{
			Config:            &gapi.AfiSafiConfig{Family: fam, Enabled: true},
			MpGracefulRestart: &gapi.MpGracefulRestart{Config: &gapi.MpGracefulRestartConfig{Enabled: gr}},
		}},
		Transport: &gapi.Transport{RemotePort: uint32(p.Port)},
	}
	if gr {
		// DeferralTime: a restarting GoBGP holds back its routes until
		// every peer has sent End-of-RIB, or this timer runs out (0 raced
		// the session's establishment and never sent them): so one peer
		// that does not come up held back every other session's routes
		// after a restart. The speaker only originates routes (it passes
		// on none it learned), so there is nothing to wait for: 1 s.
		out.GracefulRestart = &gapi.GracefulRestart{Enabled: true, RestartTime: uint32(s.cfg.RestartTime / time.Second),
			LocalRestarting: true, DeferralTime: restartDeferral}
	}
	if p.Multihop > 0 {
		out.EbgpMultihop = &gapi.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.Multihop)}
	}
	if bfd {
		// GoBGP's timers, 1 s x 3; only while the session is up
		// (bfdSync).
		out.Bfd = &gapi.BfdPeerConfig{Enabled: true}
	}
	return out
}

// Close stops the speaker: with StopWithdraw every session ends with a
// Cease (peers drop the routes now), with StopGraceful the sessions are
// closed without one (peers keep the routes for the restart time).
func (s *Speaker) Close() {
	close(s.done)
	s.wg.Wait()
	s.watch()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.StopBgp(ctx, &gapi.StopBgpRequest{AllowGracefulRestart: s.cfg.Stop == StopGraceful}); err != nil {
		s.log.Warn("bgp stop", "err", err)
	}
	s.srv.Stop()
}

// AddPeer validates and stores a peer; the speaker opens its session.
// A peer at an address already configured is a conflict.
func (s *Speaker) AddPeer(p model.BGPPeer) (*model.BGPPeer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Source = "" // (the CLI's)
	p.Created = time.Now().UTC().Truncate(time.Second)
	err := s.c.Store().Update(func(tx *store.Tx) error {
		if _, err := tx.BGPPeer(p.Address); err == nil {
			return model.Conflictf("bgp peer %s exists (xlane bgp peer rm %s first)", p.Address, p.Address)
		}
		return tx.PutBGPPeer(&p)
	})
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// RemovePeer removes a peer; its session ends with a Cease.
func (s *Speaker) RemovePeer(addr string) error {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return model.Fieldf("address", "%q: not an IP address", addr)
	}
	return s.c.Store().Update(func(tx *store.Tx) error {
		p, err := tx.BGPPeer(a)
		if err != nil {
			return err
		}
		if p.Source == SourceNodeAnnotation {
			return model.Conflictf("bgp peer %s comes from this node's Node annotation %s: change it there", a, PeersAnnotation)
		}
		return tx.DeleteBGPPeer(a)
	})
}

// Peers lists the stored peers.
func (s *Speaker) Peers() ([]model.BGPPeer, error) {
	var out []model.BGPPeer
	err := s.c.Store().View(func(tx *store.Tx) error {
		var err error
		out, err = tx.BGPPeers()
		return err
	})
	return out, err
}

// Status is the speaker's view of its sessions and announcements.
func (s *Speaker) Status() (*api.BGPStatus, error) {
	peers, err := s.peerStatuses()
	if err != nil {
		return nil, err
	}
	st := &api.BGPStatus{Enabled: true, ASN: s.cfg.ASN, RouterID: s.cfg.RouterID.String(), Stop: s.cfg.Stop,
		RestartTime: int(s.cfg.RestartTime / time.Second), Peers: peers, Announced: []api.BGPRoute{}}
	s.mu.Lock()
	for _, a := range s.announced {
		st.Announced = append(st.Announced, api.BGPRoute{Prefix: a.Prefix, Why: a.Why, Communities: communityStrings(a.Communities), MED: a.MED})
	}
	if s.lastErr != nil {
		st.LastError = s.lastErr.Error()
	}
	s.mu.Unlock()
	slices.SortFunc(st.Announced, func(a, b api.BGPRoute) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	st.Learned = s.learned()
	return st, nil
}

// peerStatuses is every stored peer with its session's state.
func (s *Speaker) peerStatuses() ([]api.BGPPeerStatus, error) {
	peers, err := s.Peers()
	if err != nil {
		return nil, err
	}
	live, err := s.livePeers()
	if err != nil {
		return nil, fmt.Errorf("list bgp peers: %w", err)
	}
	now := time.Now()
	out := []api.BGPPeerStatus{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range peers {
		ps := api.BGPPeerStatus{BGPPeer: p, State: "idle", RetryAt: s.retry.retryAt(p.Address)}
		ps.Password = ""
		if lp := live[p.Address]; lp != nil {
			st := lp.GetState()
			ps.State = sessionState(st.GetSessionState())
			ps.Flaps = st.GetFlops()
			ps.LastDown = downReason(st.GetDisconnectMessage())
			if why := s.lastDown[p.Address]; why != "" {
				ps.LastDown = why // (GoBGP's says admin down while the retrier pauses it)
			}
			ps.BFDState = bfdState(st.GetBfdState().GetSessionState())
			if up := lp.GetTimers().GetState().GetUptime(); up != nil && up.Seconds > 0 {
				ps.Up = up.AsTime().UTC()
				if ps.State == "established" {
					ps.Uptime = int64(now.Sub(ps.Up) / time.Second)
				}
			}
			if ps.State == "established" {
				ps.Local = lp.GetTransport().GetLocalAddress()
			}
			for _, af := range lp.GetAfiSafis() {
				ps.Sent += af.GetState().GetAdvertised()
				ps.Received += af.GetState().GetReceived()
				ps.Accepted += af.GetState().GetAccepted()
				if af.GetMpGracefulRestart().GetState().GetEnabled() {
					ps.GracefulRestart = true
				}
			}
		}
		out = append(out, ps)
	}
	return out, nil
}

// retryLoop paces the sessions that do not come up (retrier): every
// second it pauses the peers whose try window ended and resumes those
// whose pause did.
func (s *Speaker) retryLoop() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.c.Done():
			return
		case n := <-s.notes:
			s.notification(n.peer, n.why)
		case a := <-s.bfdKick:
			s.bfdSync(a)
		case now := <-t.C:
			s.mu.Lock()
			pause, resume := s.retry.step(now)
			for _, a := range resume {
				s.failNoted[a] = false
			}
			s.mu.Unlock()
			if len(pause) > 0 {
				// An event may lag a session that just came up:
				// never pause an established one.
				live, _ := s.livePeers()
				for _, a := range pause {
					if live[a].GetState().GetSessionState() == gapi.PeerState_SESSION_STATE_ESTABLISHED {
						s.mu.Lock()
						s.retry.observe(a, true, now)
						s.retry.resume(a, now)
						s.mu.Unlock()
						continue
					}
					s.mu.Lock()
					until, why := s.retry.retryAt(a), s.lastDown[a]
					s.mu.Unlock()
					if why == "" {
						why = "no session within the try window (nothing answers: down, filtered, or a TCP MD5 key mismatch)"
					}
					in := until.Sub(now).Round(time.Second)
					s.log.Info("bgp session not up: pausing its attempts", "peer", a, "retry_in", in, "why", why)
					s.emit(api.MonitorEvent{Action: EventBackoff, Peer: a.String(), Reason: fmt.Sprintf("%s; next try in %s", why, in)})
					if err := s.srv.DisablePeer(context.Background(), &gapi.DisablePeerRequest{Address: a.String()}); err != nil {
						s.log.Warn("bgp: pause peer", "peer", a, "err", err)
					}
				}
			}
			for _, a := range resume {
				if err := s.srv.EnablePeer(context.Background(), &gapi.EnablePeerRequest{Address: a.String()}); err != nil {
					s.log.Warn("bgp: resume peer", "peer", a, "err", err)
				}
			}
		}
	}
}

// learned lists the best paths received from peers.
func (s *Speaker) learned() []api.BGPRoute {
	var out []api.BGPRoute
	for _, fam := range []gbgp.Family{gbgp.RF_IPv4_UC, gbgp.RF_IPv6_UC} {
		s.srv.ListPath(apiutil.ListPathRequest{TableType: gapi.TableType_TABLE_TYPE_GLOBAL, Family: fam}, func(nlri gbgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				if !p.Best || !p.PeerAddress.IsValid() || p.PeerAddress.IsUnspecified() {
					continue
				}
				pfx, err := netip.ParsePrefix(nlri.String())
				if err != nil {
					continue
				}
				out = append(out, api.BGPRoute{Prefix: pfx, NextHop: nextHop(p), Why: "peer " + p.PeerAddress.String()})
			}
		})
	}
	return out
}

// nextHop is a path's next hop (NEXT_HOP, or MP_REACH_NLRI's).
func nextHop(p *apiutil.Path) netip.Addr {
	for _, a := range p.Attrs {
		switch v := a.(type) {
		case *gbgp.PathAttributeNextHop:
			return v.Value
		case *gbgp.PathAttributeMpReachNLRI:
			return v.Nexthop
		}
	}
	return netip.Addr{}
}

func sessionState(s gapi.PeerState_SessionState) string {
	switch s {
	case gapi.PeerState_SESSION_STATE_IDLE:
		return "idle"
	case gapi.PeerState_SESSION_STATE_CONNECT:
		return "connect"
	case gapi.PeerState_SESSION_STATE_ACTIVE:
		return "active"
	case gapi.PeerState_SESSION_STATE_OPENSENT:
		return "opensent"
	case gapi.PeerState_SESSION_STATE_OPENCONFIRM:
		return "openconfirm"
	case gapi.PeerState_SESSION_STATE_ESTABLISHED:
		return "established"
	}
	return "unknown"
}
