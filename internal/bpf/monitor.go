package bpf

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
)

// Monitor types, generated from bpf/lib/abi.h (see bpf/lib/monitor.h).
type (
	MonEvent  = tcMonEvent
	MonConfig = tcMonConfig
	MonState  = tcMonState
	MonType   = tcMonType
)

// Event types (bits of MonConfig.Types) and verdicts, from abi.h.
const (
	MonDrop      = tcMonTypeMON_DROP
	MonVerdict   = tcMonTypeMON_VERDICT
	MonFW        = tcMonTypeMON_FW
	MonFlowNew   = tcMonTypeMON_FLOW_NEW
	MonFlowClose = tcMonTypeMON_FLOW_CLOSE
	MonNAT       = tcMonTypeMON_NAT
	MonLB        = tcMonTypeMON_LB
	MonAll       = tcMonTypeMON_TYPES_ALL

	MonVPass    = uint8(tcMonVerdictMON_V_PASS)
	MonVDrop    = uint8(tcMonVerdictMON_V_DROP)
	MonVFwd     = uint8(tcMonVerdictMON_V_FWD)
	MonVReplied = uint8(tcMonVerdictMON_V_REPLIED)
)

// monTypeNames names the event types as the CLI and the API do.
var monTypeNames = []struct {
	t    MonType
	name string
}{
	{MonDrop, "drop"}, {MonVerdict, "verdict"}, {MonFW, "fw"}, {MonFlowNew, "flow_new"},
	{MonFlowClose, "flow_close"}, {MonNAT, "nat"}, {MonLB, "lb"},
}

// String names one event type.
func (t MonType) String() string {
	for _, n := range monTypeNames {
		if n.t == t {
			return n.name
		}
	}
	return fmt.Sprintf("type_%d", uint32(t))
}

// MonTypeNames lists every event type's name.
func MonTypeNames() []string {
	out := make([]string, 0, len(monTypeNames))
	for _, n := range monTypeNames {
		out = append(out, n.name)
	}
	return out
}

// ParseMonTypes turns names ("drop", "fw", ...; "all") into type bits.
func ParseMonTypes(names []string) (MonType, error) {
	var t MonType
	for _, name := range names {
		name = strings.TrimSpace(name)
		if name == "all" {
			t |= MonAll
			continue
		}
		found := false
		for _, n := range monTypeNames {
			if n.name == name {
				t |= n.t
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown event type %q (one of %s, all)", name, strings.Join(MonTypeNames(), ", "))
		}
	}
	return t, nil
}

// MonVerdictName names an enum mon_verdict value.
func MonVerdictName(v uint8) string {
	switch v {
	case MonVPass:
		return "pass"
	case MonVDrop:
		return "drop"
	case MonVFwd:
		return "forward"
	case MonVReplied:
		return "replied"
	}
	return fmt.Sprintf("verdict_%d", v)
}

// MonitorMaps are the maps of bpf/lib/monitor.h: the switch (config), the
// per-CPU rate limit and counters (state), and the ring of events.
type MonitorMaps struct {
	Config *ebpf.Map
	State  *ebpf.Map
	Events *ebpf.Map
}

// Monitor returns the monitor's maps.
func (o *Objects) Monitor() MonitorMaps {
	return MonitorMaps{Config: o.XlaneMonConfig, State: o.XlaneMonState, Events: o.XlaneMonEvents}
}

// Set switches event types on (types, 0: off) at rate events per second
// per CPU (0: unlimited) with a bucket of burst events.
func (m MonitorMaps) Set(types MonType, rate, burst uint32) error {
	c := MonConfig{Types: uint32(types), Rate: rate, Burst: burst}
	if err := m.Config.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("set monitor config: %w", err)
	}
	return nil
}

// MonCounters are the monitor's counters summed over CPUs.
type MonCounters struct {
	Emitted    uint64 // events written to the ring
	Suppressed uint64 // over the per-CPU rate: not emitted
	Lost       uint64 // the ring was full
}

// Counters sums the per-CPU counters.
func (m MonitorMaps) Counters() (MonCounters, error) {
	var per []MonState
	if err := m.State.Lookup(uint32(0), &per); err != nil {
		return MonCounters{}, fmt.Errorf("read monitor counters: %w", err)
	}
	var c MonCounters
	for _, s := range per {
		c.Emitted += s.Emitted
		c.Suppressed += s.Suppressed
		c.Lost += s.Lost
	}
	return c, nil
}

// DecodeMonEvent decodes one ring buffer record.
func DecodeMonEvent(raw []byte) (MonEvent, error) {
	var e MonEvent
	err := DecodeMonEventInto(raw, &e)
	return e, err
}

// monEventSize is the size of struct mon_event.
const monEventSize = int(unsafe.Sizeof(MonEvent{}))

// DecodeMonEventInto decodes one ring buffer record into e without
// allocating: the record is the C struct, in this machine's byte order,
// which is the Go struct's layout (bpf2go generates it with the same
// offsets and explicit padding).
func DecodeMonEventInto(raw []byte, e *MonEvent) error {
	if len(raw) < monEventSize {
		return fmt.Errorf("decode monitor event: %d bytes, want %d", len(raw), monEventSize)
	}
	*e = *(*MonEvent)(unsafe.Pointer(&raw[0]))
	return nil
}
