package firewall

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
)

// What the firewall's control (internal/firewall/control) needs of the
// maps beyond installing generations: the DDoS settings and the blocklist
// in the maps' layout, the action names and the sampled hits, so that the
// control plane never handles a map value itself.

// ActionName names a firewall action of the datapath ("drop").
func ActionName(a uint8) string { return bpf.FwActionName(a) }

// ApplyDDoS writes the uplink's DDoS settings d; the blocklist is
// consulted only when it holds something (blocked > 0: a lookup per
// packet).
func (in *Installer) ApplyDDoS(d rules.DDoS, blocked int) error {
	return in.SetDDoS(ddosVal(d, blocked))
}

// ddosVal is the datapath's view of the settings.
func ddosVal(d rules.DDoS, blocked int) bpf.FwDdos {
	d.Normalize()
	v := bpf.FwDdos{Pps: d.PPS, Burst: d.Burst, SynPps: d.SYNPPS, SynBurst: d.SYNBurst,
		V4Prefix: d.V4Prefix, V6Prefix: d.V6Prefix}
	if blocked > 0 {
		v.Flags |= bpf.FwDdosBlocklist
	}
	if d.PPS > 0 {
		v.Flags |= bpf.FwDdosRate
	}
	if d.SYNPPS > 0 {
		v.Flags |= bpf.FwDdosSYN
	}
	if d.Malformed {
		v.Flags |= bpf.FwDdosMalformed
	}
	return v
}

// BlocklistSize counts the prefixes in the datapath's blocklists.
func (in *Installer) BlocklistSize() int {
	n := 0
	for _, m := range []*ebpf.Map{in.m.Block4, in.m.Block6} {
		k := make([]byte, m.KeySize())
		var v uint32
		it := m.Iterate()
		for it.Next(&k, &v) {
			n++
		}
	}
	return n
}

// Event is one sampled rule hit (a rule with log: N, or a log rule).
type Event struct {
	Slot     uint32 // the rule's counter slot
	Action   string
	Kind     Kind // the hook that matched
	Proto    uint8
	Src, Dst netip.Addr
	Sport    uint16
	Dport    uint16
	Len      uint32
	Ifindex  uint32
}

// ErrEventsClosed ends Events when done closes.
var ErrEventsClosed = ringbuf.ErrClosed

// Events calls fn with every sampled rule hit until done closes (then it
// returns ErrEventsClosed) or the ring buffer fails.
func (in *Installer) Events(done <-chan struct{}, fn func(Event)) error {
	rd, err := ringbuf.NewReader(in.m.Events)
	if err != nil {
		return err
	}
	go func() {
		<-done
		rd.Close()
	}()
	for {
		rec, err := rd.Read()
		if err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return ErrEventsClosed
			}
			return err
		}
		var e bpf.FwEvent
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &e); err != nil {
			continue
		}
		fn(Event{Slot: e.Slot, Action: ActionName(e.Action), Kind: Kind(e.Kind), Proto: e.Proto,
			Src: netip.AddrFrom16(e.Saddr).Unmap(), Dst: netip.AddrFrom16(e.Daddr).Unmap(),
			Sport: e.Sport, Dport: e.Dport, Len: e.Len, Ifindex: e.Ifindex})
	}
}
