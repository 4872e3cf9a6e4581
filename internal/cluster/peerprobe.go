package cluster

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/xlane-dev/xlane/internal/model"
)

// Peer liveness (docs/multinode.md "A peer that disappears"). Every
// probe interval the daemon sends an ICMP echo request to each peer's
// underlay address (the one its tunnel or route uses); a peer that has
// not answered for peerDownAfter intervals is marked down: its prefixes
// in xlane_peers get XL_PEER_DOWN, and the datapath drops its pods'
// packets as drop_peer_down instead of sending them into an underlay
// that loses them. The first answer marks it up again. Only the daemon
// probes: a healthy peer's packets pay nothing (the flags test is the one
// the datapath always made), and the peer needs nothing but a kernel that
// answers echo requests (its xlaned may be dead: its pods still answer).

// DefaultPeerProbeInterval is how often each peer is probed (--peer-probe).
const DefaultPeerProbeInterval = time.Second

// peerDownAfter is how many intervals without an answer mark a peer down.
const peerDownAfter = 3

// peerHealth is the probes' state, by node id (a re-added node is new).
type peerHealth struct {
	mu    sync.Mutex
	peers map[uint32]*peerState
}

type peerState struct {
	name      string
	addr      netip.Addr
	down      bool
	since     time.Time // the state's start (for up: the probing's)
	lastReply time.Time
}

// isDown says whether node id is marked down (applyNode's flag).
func (h *peerHealth) isDown(id uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.peers[id]
	return s != nil && s.down
}

// liveness is a node's state for the API (nil: not probed).
func (h *peerHealth) liveness(id uint32) *model.NodeLiveness {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.peers[id]
	if s == nil {
		return nil
	}
	l := &model.NodeLiveness{State: model.PeerUp, Address: s.addr, Since: s.since, LastReply: s.lastReply}
	if s.down {
		l.State = model.PeerDown
	}
	return l
}

// track makes sure node id is probed at addr; a new node, or a new
// address, starts up with a full grace period.
func (h *peerHealth) track(id uint32, name string, addr netip.Addr, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.peers == nil {
		h.peers = map[uint32]*peerState{}
	}
	if s := h.peers[id]; s != nil && s.addr == addr {
		return
	}
	h.peers[id] = &peerState{name: name, addr: addr, since: now}
}

// keep forgets every node not in ids.
func (h *peerHealth) keep(ids map[uint32]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.peers {
		if !ids[id] {
			delete(h.peers, id)
		}
	}
}

func (h *peerHealth) forget(id uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.peers, id)
}

// reply records an answer from addr.
func (h *peerHealth) reply(addr netip.Addr, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.peers {
		if s.addr == addr {
			s.lastReply = now
		}
	}
}

// changes returns the nodes whose state flips now: down after silence
// for window (counted from the last answer or the probing's start), up on
// an answer after they went down. The caller applies them (setPeerDown).
func (h *peerHealth) changes(now time.Time, window time.Duration) map[uint32]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[uint32]bool{}
	for id, s := range h.peers {
		heard := s.lastReply
		if heard.Before(s.since) {
			heard = s.since
		}
		switch {
		case !s.down && now.Sub(heard) > window:
			out[id] = true
		case s.down && s.lastReply.After(s.since):
			out[id] = false
		}
	}
	return out
}

// mark sets node id's state (no-op for a node no longer tracked).
func (h *peerHealth) mark(id uint32, down bool, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.peers[id]
	if s == nil || s.down == down {
		return false
	}
	s.down, s.since = down, now
	return true
}

// probePeers runs until done: the echo requests, the answers, the
// marking. Without an ICMP socket (no privilege) it logs why and
// returns: peers then stay up.
func (c *Cluster) probePeers(interval time.Duration, done <-chan struct{}) {
	c4, err4 := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	c6, err6 := icmp.ListenPacket("ip6:ipv6-icmp", "::")
	if err4 != nil && err6 != nil {
		c.c.Log().Error("peer probes: no ICMP socket, peers are never marked down", "err", errors.Join(err4, err6))
		return
	}
	id := uint16(rand.Uint32())
	for _, conn := range []*icmp.PacketConn{c4, c6} {
		if conn != nil {
			go c.peerReplies(conn, id)
			defer conn.Close()
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var seq uint16
	for {
		seq++
		c.probeRound(c4, c6, id, seq, interval)
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

func (c *Cluster) probeRound(c4, c6 *icmp.PacketConn, id, seq uint16, interval time.Duration) {
	nodes, err := c.Nodes()
	if err != nil {
		c.c.Log().Error("peer probes: list nodes", "err", err)
		return
	}
	self := SelfNode(nodes)
	now := time.Now()
	ids := map[uint32]bool{}
	for i := range nodes {
		n := &nodes[i]
		a := peerUnderlay(n, self)
		if n.Self || !a.IsValid() {
			continue
		}
		ids[n.ID] = true
		c.peers.track(n.ID, n.Name, a, now)
		conn := c4
		var typ icmp.Type = ipv4.ICMPTypeEcho
		if !a.Is4() {
			conn, typ = c6, ipv6.ICMPTypeEchoRequest
		}
		if conn == nil {
			continue
		}
		data := make([]byte, 8)
		binary.BigEndian.PutUint64(data, uint64(now.UnixNano()))
		msg, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: int(id), Seq: int(seq), Data: data}}).Marshal(nil)
		if err == nil {
			// An unreachable peer is what the answers tell; the send's
			// own error (no route, no neighbour yet) says nothing more.
			_, _ = conn.WriteTo(msg, &net.IPAddr{IP: a.AsSlice()})
		}
	}
	c.peers.keep(ids)
	for nid, down := range c.peers.changes(now, peerDownAfter*interval) {
		c.setPeerDown(nid, down)
	}
}

// peerReplies records the echo replies to this daemon's requests.
func (c *Cluster) peerReplies(conn *icmp.PacketConn, id uint16) {
	proto := 1
	if conn.IPv6PacketConn() != nil {
		proto = 58
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || (m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply) {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); !ok || uint16(e.ID) != id {
			continue
		}
		ip, ok := from.(*net.IPAddr)
		if !ok {
			continue
		}
		if a, ok := netip.AddrFromSlice(ip.IP); ok {
			c.peers.reply(a.Unmap(), time.Now())
		}
	}
}

// setPeerDown marks node id down (or up) and rewrites its prefixes with
// the flag.
func (c *Cluster) setPeerDown(id uint32, down bool) {
	c.c.Lock()
	defer c.c.Unlock()
	nodes, err := c.Nodes()
	if err != nil {
		c.c.Log().Error("peer probes: list nodes", "err", err)
		return
	}
	for i := range nodes {
		n := &nodes[i]
		if n.ID != id || n.Self {
			continue
		}
		if !c.peers.mark(id, down, time.Now()) {
			return
		}
		if err := c.applyNode(n, SelfNode(nodes)); err != nil {
			c.c.Log().Error("peer probes: mark node", "node", n.Name, "down", down, "err", err)
			return
		}
		if down {
			c.c.Log().Warn("peer down: no answer to probes, its pods' packets are dropped (drop_peer_down)", "node", n.Name, "underlay", peerUnderlay(n, SelfNode(nodes)), "after", peerDownAfter*c.cfg.PeerProbeInterval)
		} else {
			c.c.Log().Info("peer up again", "node", n.Name)
		}
		return
	}
}

// withLiveness fills in the nodes' probe state.
func (c *Cluster) withLiveness(nodes []model.Node) {
	for i := range nodes {
		if !nodes[i].Self {
			nodes[i].Liveness = c.peers.liveness(nodes[i].ID)
		}
	}
}
