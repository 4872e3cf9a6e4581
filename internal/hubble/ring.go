package hubble

import (
	"net/netip"
	"sync"
	"time"
	"unsafe"
)

// kind is the monitor event type a record comes from.
type kind uint8

const (
	kindDrop    kind = iota + 1 // a packet dropped, with its reason
	kindFW                      // a firewall rule decided (policy verdict)
	kindFlowNew                 // conntrack created a flow (forwarded)
	kindNAT                     // a flow's source or destination rewritten
	kindLB                      // a service picked a backend
)

// record is one flow event as the ring keeps it: compact, without names
// (identity is resolved when the flow is read: identity.go). Strings are
// interned by the feed (a small set: reasons, rules, services, devices).
type record struct {
	time     int64 // Unix nanoseconds
	kind     kind
	hook     string // from_endpoint, to_endpoint, uplink, socket, ""
	proto    uint8
	icmp     bool // icmpType/icmpCode are set
	icmpType uint8
	icmpCode uint8
	sport    uint16
	dport    uint16
	length   uint32
	src, dst netip.Addr
	// xlated is the translated address: NAT's new source (natSrc) or
	// destination, LB's backend.
	xlated   netip.AddrPort
	natSrc   bool
	reason   string // drop: xlane's reason name (enum xl_reason)
	rule     string // fw, a firewall drop: the deciding rule
	action   string // fw: allow, drop, reject, log; flow_new: the state
	service  string // lb: the service's name
	device   string
	endpoint string // the endpoint the monitor attributed the event to
}

// recordBytes is what one slot of the ring takes (the interned strings
// are shared, and not counted).
const recordBytes = int(unsafe.Sizeof(record{}))

// ring is a bounded ring of records: the newest cap records, the oldest
// overwritten. Sequence numbers count every record ever added; seq s
// lives at buf[s % cap] while s >= next-cap.
type ring struct {
	mu     sync.RWMutex
	buf    []record
	next   uint64        // the sequence number of the next record
	notify chan struct{} // closed (and replaced) when records are added
	start  time.Time
}

func newRing(n int) *ring {
	return &ring{buf: make([]record, n), notify: make(chan struct{}), start: time.Now()}
}

// add appends records, overwriting the oldest, and wakes followers. It
// never waits for a reader.
func (r *ring) add(recs []record) {
	if len(recs) == 0 {
		return
	}
	r.mu.Lock()
	for i := range recs {
		r.buf[r.next%uint64(len(r.buf))] = recs[i]
		r.next++
	}
	close(r.notify)
	r.notify = make(chan struct{})
	r.mu.Unlock()
}

// bounds are the oldest sequence number held, the next one, and the
// channel closed at the next add.
func (r *ring) bounds() (oldest, next uint64, wait <-chan struct{}) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.oldestLocked(), r.next, r.notify
}

func (r *ring) oldestLocked() uint64 {
	if n := uint64(len(r.buf)); r.next > n {
		return r.next - n
	}
	return 0
}

// get copies out the record of sequence number seq; false when it was
// overwritten or not written yet.
func (r *ring) get(seq uint64, out *record) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if seq < r.oldestLocked() || seq >= r.next {
		return false
	}
	*out = r.buf[seq%uint64(len(r.buf))]
	return true
}

// len is how many records the ring holds, cap how many it can.
func (r *ring) len() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.next - r.oldestLocked()
}

func (r *ring) cap() uint64 { return uint64(len(r.buf)) }

// seen is how many records were ever added.
func (r *ring) seen() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.next
}
