package firewall

import (
	"net/netip"
	"slices"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// NoL4 is the port value of a packet without ports (FW_NO_L4): a
// non-first fragment, a protocol without ports, a header out of reach.
const NoL4 = 65536

// Packet is what the classifier looks at.
type Packet struct {
	Kind       Kind
	Net        uint32 // the endpoint's network; 0 on the uplink
	SMAC, DMAC [6]byte
	Src, Dst   netip.Addr // IPv4 unmapped
	Proto      uint8
	SPort      uint32 // TCP/UDP source port, ICMP code, or NoL4
	DPort      uint32 // TCP/UDP destination port, ICMP type, or NoL4
	Flags      uint8  // TCP flags byte
}

// Evaluate is the reference model: it tries the rules in order, one by
// one, field by field, and returns the index of the rule that decides pk
// and the log rules met on the way; -1 when no rule matches (allow). A
// pass rule that matches skips the rules of priority below its PassTo.
func (p *Policy) Evaluate(pk Packet) (decides int, logged []int) {
	for i := 0; i < len(p.Rules); i++ {
		r := &p.Rules[i]
		if !slices.ContainsFunc(r.Matches, func(m Match) bool { return m.matches(pk) }) {
			continue
		}
		if r.Names != nil && (p.Resolved == nil || !p.Resolved(i, pk.Src, pk.Dst)) {
			continue // a destination the source did not resolve for the names
		}
		switch r.Action {
		case bpf.FwLog:
			logged = append(logged, i)
			continue
		case bpf.FwPass:
			i = p.passTarget(i) - 1
			continue
		}
		return i, logged
	}
	return -1, logged
}

// passTarget is the index of the rule the search goes on at after the
// pass rule i: the first later one of priority PassTo or more, or the
// first default.
func (p *Policy) passTarget(i int) int {
	j := i + 1
	for j < len(p.Rules) && !p.Rules[j].Default && p.Rules[j].Priority < p.Rules[i].PassTo {
		j++
	}
	return j
}

func (m *Match) matches(pk Packet) bool {
	if !slices.ContainsFunc(m.Ctx, func(c Ctx) bool {
		return c.Kind == pk.Kind && (c.Net == 0 || c.Net == pk.Net)
	}) {
		return false
	}
	if pk.Src.Is4() {
		if !m.V4 || !containedIn(pk.Src, m.Src4) || !containedIn(pk.Dst, m.Dst4) {
			return false
		}
	} else if !m.V6 || !containedIn(pk.Src, m.Src6) || !containedIn(pk.Dst, m.Dst6) {
		return false
	}
	if m.Proto != nil && !slices.Contains(m.Proto, pk.Proto) {
		return false
	}
	if m.SPort != nil && !inRanges(pk.SPort, m.SPort) {
		return false
	}
	if m.DPort != nil && !inRanges(pk.DPort, m.DPort) {
		return false
	}
	if pk.Flags&m.FlagsMask != m.FlagsComp {
		return false
	}
	if m.SMAC != nil && !slices.Contains(m.SMAC, pk.SMAC) {
		return false
	}
	if m.DMAC != nil && !slices.Contains(m.DMAC, pk.DMAC) {
		return false
	}
	return true
}

func inRanges(v uint32, rs []PortRange) bool {
	for _, r := range rs {
		if v >= r.Lo && v <= r.Hi {
			return true
		}
	}
	return false
}
