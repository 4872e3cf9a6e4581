package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
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

// neighMirror is what `xlane status` shows of the neighbour mirror.
type neighMirror struct {
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

// syncNeighbours mirrors the node's neighbour table (ARP and ND) into
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
func (d *Daemon) syncNeighbours(done <-chan struct{}) error {
	node, err := netns.Get()
	if err != nil {
		return fmt.Errorf("open own netns: %w", err)
	}
	sub, err := d.subscribeNeigh(node, done)
	if err != nil {
		node.Close()
		return err
	}
	go func() {
		defer node.Close()
		d.mirrorNeighbours(node, sub, done)
	}()
	return nil
}

func (d *Daemon) subscribeNeigh(node netns.NsHandle, done <-chan struct{}) (*neighSub, error) {
	if err := d.dp.FlushNeigh(); err != nil {
		return nil, err
	}
	sub := &neighSub{ch: make(chan netlink.NeighUpdate, neighBacklog), stop: make(chan struct{})}
	err := netlink.NeighSubscribeWithOptions(sub.ch, sub.stop, netlink.NeighSubscribeOptions{
		Namespace:              &node,
		ListExisting:           true,
		ReceiveBufferSize:      neighRcvbuf,
		ReceiveBufferForceSize: true,
		ErrorCallback: func(err error) {
			d.neigh.fail(err)
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
	d.neigh.sub.Store(sub)
	return sub, nil
}

// mirrorNeighbours applies events until done closes, resubscribing (and so
// resyncing) whenever a subscription ends.
func (d *Daemon) mirrorNeighbours(node netns.NsHandle, sub *neighSub, done <-chan struct{}) {
	for {
		for u := range sub.ch {
			d.applyNeigh(u)
			d.neigh.events.Add(1)
		}
		sub.close()
		for {
			select {
			case <-done:
				return
			default:
			}
			var err error
			if sub, err = d.subscribeNeigh(node, done); err == nil {
				break
			}
			d.neigh.fail(err)
			select {
			case <-done:
				return
			case <-time.After(neighRetry):
			}
		}
		d.neigh.resynced()
		d.log.Warn("neighbour mirror resynced after an event loss", "resyncs", d.neigh.resyncs.Load(), "cause", d.neigh.status().LastError)
	}
}

func (m *neighMirror) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastErr = err.Error()
}

func (m *neighMirror) resynced() {
	m.resyncs.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastResync = time.Now().UTC()
}

func (m *neighMirror) status() *api.NeighMirror {
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

func (d *Daemon) applyNeigh(u netlink.NeighUpdate) {
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
		err = d.dp.PutNeigh(addr, n.LinkIndex, net.HardwareAddr(n.HardwareAddr))
	} else {
		err = d.dp.DeleteNeigh(addr, n.LinkIndex)
	}
	if err != nil {
		d.log.Warn("mirror neighbour", "addr", addr, "ifindex", n.LinkIndex, "err", err)
	}
}
