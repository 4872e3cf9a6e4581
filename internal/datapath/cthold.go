package datapath

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// CTTimeWaitHold is how long past its deadline the GC keeps a closing or
// closed TCP flow to a shared backend (one that more than one service
// balances to). The backend closed such flows first and keeps a TIME_WAIT
// socket on the translated tuple (client address and port, backend) for
// 60 s after the last packet; xlane's closed flows expire 10 s after it.
// Were the tuple free sooner, a client reusing its port towards another
// VIP of the same backend (clients pick ports per destination, and a
// thousand VIPs make that common) would reach the backend on that tuple
// with a sequence number and timestamps computed for another destination:
// the TIME_WAIT socket refuses the SYN as an old duplicate (PAWS) and the
// client waits a second or three to retransmit, or gives up. Held, the
// tuple stays taken and the new flow's source port is remapped (the clash
// range, 1024-65535, as Linux's NAT, whose conntrack holds TIME_WAIT
// flows 120 s). 10 s + 55 s: TIME_WAIT plus 5 s.
const CTTimeWaitHold = 55 * time.Second

// backendRef is a service backend as conntrack sees it.
type backendRef struct {
	addr  [16]byte
	port  uint16 // network order
	proto uint8
}

// sharedBackends counts, per backend, the services balancing to it, and
// remembers what each service has programmed (its backends, its table
// size), so that reprogramming it needs no probing.
type sharedBackends struct {
	mu    sync.RWMutex
	bySvc map[uint32]svcProgrammed
	count map[backendRef]int
}

type svcProgrammed struct {
	refs []backendRef
	size uint32
}

// set records service id's backends and table size (refs nil, size 0:
// the service is gone).
func (s *sharedBackends) set(id uint32, refs []backendRef, size uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bySvc == nil {
		s.bySvc, s.count = map[uint32]svcProgrammed{}, map[backendRef]int{}
	}
	for _, r := range s.bySvc[id].refs {
		if s.count[r]--; s.count[r] <= 0 {
			delete(s.count, r)
		}
	}
	delete(s.bySvc, id)
	if size == 0 {
		return
	}
	s.bySvc[id] = svcProgrammed{refs: refs, size: size}
	for _, r := range refs {
		s.count[r]++
	}
}

func (s *sharedBackends) shared(r backendRef) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.count[r] > 1
}

// backends is how many backend entries service id has, known false if
// this daemon did not program it.
func (s *sharedBackends) backends(id uint32) (n int, known bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.bySvc[id]
	return len(p.refs), ok
}

// size is service id's table size, known false as for backends.
func (s *sharedBackends) size(id uint32) (uint32, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.bySvc[id]
	return p.size, ok
}

func serviceBackendRefs(s *model.Service) []backendRef {
	refs := make([]backendRef, 0, len(s.Backends))
	for _, b := range s.Backends {
		refs = append(refs, backendRef{addr: b.Addr.Addr().As16(), port: htons(b.Addr.Port()), proto: protoNumber(s.Proto)})
	}
	return refs
}

// ctBackend returns the backend a DNAT flow's entry translates to (the
// original entry's target, the reply entry's source), ok false for other
// entries.
func ctBackend(k *bpf.CTKey, v *bpf.CTVal) (backendRef, bool) {
	switch {
	case v.Dir == uint8(bpf.CTDirOrig) && v.Nat&uint8(bpf.CTNatDst) != 0:
		return backendRef{addr: v.NatAddr, port: v.NatPort, proto: k.Proto}, true
	case v.Dir == uint8(bpf.CTDirReply) && v.Nat&uint8(bpf.CTNatSrc) != 0:
		return backendRef{addr: k.Saddr, port: k.Sport, proto: k.Proto}, true
	}
	return backendRef{}, false
}

// ctHeld reports whether the GC must keep entry (k, v), expired: a closing
// or closed TCP flow to a shared backend within CTTimeWaitHold of its
// deadline. Both entries of a flow get the same answer.
func (d *BPF) ctHeld(k *bpf.CTKey, v *bpf.CTVal, now uint64) bool {
	if k.Proto != unix.IPPROTO_TCP || v.State < uint8(bpf.CTClosing) || ctCollectable(v.Expires, now, uint64(CTTimeWaitHold)) {
		return false
	}
	r, ok := ctBackend(k, v)
	return ok && d.shared.shared(r)
}
