package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
)

// usableNeigh are the neighbour states whose MAC the XDP datapath may use.
// STALE and DELAY entries still hold a MAC the kernel itself sends to.
const usableNeigh = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// neighRcvbuf is the event socket's receive buffer (SO_RCVBUFFORCE, past
// net.core.rmem_max). The default ~208 KiB overflowed on a burst of ~500
// events (a container probing 1,024 on-link addresses); 8 MiB holds several
// thousand, and an overflow beyond that resyncs anyway. A variable so the
// tests can make the socket overflow.
var neighRcvbuf = 8 << 20

const (
	// neighBacklog is the channel between the socket reader and the map
	// writer.
	neighBacklog = 4096
	// neighRetry bounds how often a failing subscription is retried.
	neighRetry = time.Second
)

// Neighbours is the neighbour mirror (Start), and what `xlane status`
// shows of it (Status). It runs wherever the BPF datapath does, on a node
// alone too: the XDP datapath's next hops are its own or other nodes'.
type Neighbours struct {
	dp  datapath.Neighbours
	log *slog.Logger

	events  atomic.Uint64
	resyncs atomic.Uint64
	sub     atomic.Pointer[neighSub] // the current subscription

	mu         sync.Mutex
	lastErr    string
	lastResync time.Time
}

// neighSub is one netlink subscription: its events and the channel that
// closes its socket. netlink closes ch after an error but leaves the socket
// open until stop closes, so every subscription is stopped once done with.
type neighSub struct {
	ch   chan netlink.NeighUpdate
	stop chan struct{}
	once sync.Once
}

func (s *neighSub) close() { s.once.Do(func() { close(s.stop) }) }

// Start mirrors the node's neighbour table (ARP and ND) into
// xlane_neigh until done closes: the XDP datapath cannot resolve neighbours
// itself, so on a miss it passes the packet to Linux, whose resolution then
// arrives here as an event and fills the map for the following packets.
//
// A lost event would leave a stale MAC in the map for good, so any error
// of the subscription (ENOBUFS when a burst overflows the socket, an
// interrupted dump) ends it and a fresh one resyncs: the map is emptied
// and refilled from a full dump. Until the dump arrives the map misses,
// and a miss only costs a trip through Linux, where a stale entry would
// send traffic to the wrong MAC.
//
// Resubscriptions run on other threads than the first, so the namespace is
// held open and named: an xlaned in a namespace of its own (the tests'
// nodes) must not start mirroring the machine's table instead.
func (m *Neighbours) Start(dp datapath.Neighbours, log *slog.Logger, done <-chan struct{}) error {
	m.dp, m.log = dp, log
	node, err := netns.Get()
	if err != nil {
		return fmt.Errorf("open own netns: %w", err)
	}
	sub, err := m.subscribe(node, done)
	if err != nil {
		node.Close()
		return err
	}
	go func() {
		defer node.Close()
		m.mirror(node, sub, done)
	}()
	return nil
}

func (m *Neighbours) subscribe(node netns.NsHandle, done <-chan struct{}) (*neighSub, error) {
	if err := m.dp.FlushNeigh(); err != nil {
		return nil, err
	}
	sub := &neighSub{ch: make(chan netlink.NeighUpdate, neighBacklog), stop: make(chan struct{})}
	err := netlink.NeighSubscribeWithOptions(sub.ch, sub.stop, netlink.NeighSubscribeOptions{
		Namespace:              &node,
		ListExisting:           true,
		ReceiveBufferSize:      neighRcvbuf,
		ReceiveBufferForceSize: true,
		ErrorCallback: func(err error) {
			m.fail(err)
			if errors.Is(err, netlink.ErrDumpInterrupted) {
				sub.close() // an inconsistent dump: start over
			}
		},
	})
	if err != nil {
		sub.close()
		return nil, err
	}
	go func() {
		select {
		case <-done:
			sub.close()
		case <-sub.stop:
		}
	}()
	m.sub.Store(sub)
	return sub, nil
}

// mirror applies events until done closes, resubscribing (and so
// resyncing) whenever a subscription ends.
func (m *Neighbours) mirror(node netns.NsHandle, sub *neighSub, done <-chan struct{}) {
	for {
		for u := range sub.ch {
			m.apply(u)
			m.events.Add(1)
		}
		sub.close()
		for {
			select {
			case <-done:
				return
			default:
			}
			var err error
			if sub, err = m.subscribe(node, done); err == nil {
				break
			}
			m.fail(err)
			select {
			case <-done:
				return
			case <-time.After(neighRetry):
			}
		}
		m.resynced()
		m.log.Warn("neighbour mirror resynced after an event loss", "resyncs", m.resyncs.Load(), "cause", m.Status().LastError)
	}
}

func (m *Neighbours) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastErr = err.Error()
}

func (m *Neighbours) resynced() {
	m.resyncs.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastResync = time.Now().UTC()
}

// Status is the mirror's counters and its last error.
func (m *Neighbours) Status() *api.NeighMirror {
	s := &api.NeighMirror{Events: m.events.Load(), Resyncs: m.resyncs.Load()}
	if sub := m.sub.Load(); sub != nil {
		s.Pending = len(sub.ch)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s.LastError = m.lastErr
	if !m.lastResync.IsZero() {
		t := m.lastResync
		s.LastResync = &t
	}
	return s
}

func (m *Neighbours) apply(u netlink.NeighUpdate) {
	n := u.Neigh
	if n.Flags&netlink.NTF_PROXY != 0 || (n.Family != unix.AF_INET && n.Family != unix.AF_INET6) {
		return
	}
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return
	}
	addr = addr.Unmap()
	var err error
	if u.Type == unix.RTM_NEWNEIGH && n.State&usableNeigh != 0 && len(n.HardwareAddr) == 6 {
		err = m.dp.PutNeigh(addr, n.LinkIndex, net.HardwareAddr(n.HardwareAddr))
	} else {
		err = m.dp.DeleteNeigh(addr, n.LinkIndex)
	}
	if err != nil {
		m.log.Warn("mirror neighbour", "addr", addr, "ifindex", n.LinkIndex, "err", err)
	}
}
