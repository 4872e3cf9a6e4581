package bpf

import (
	"github.com/cilium/ebpf"
)

// Firewall types, generated from bpf/lib/abi.h (see bpf/lib/fw.h).
type (
	FwExactKey  = tcFwExactKey
	FwAddrKey   = tcFwAddrKey
	FwBits      = tcFwBits
	FwRule      = tcFwRule
	FwGen       = tcFwGen
	FwLin       = tcFwLin
	FwState     = tcFwState
	FwCounter   = tcFwCounter
	FwEvent     = tcFwEvent
	FwDdos      = tcFwDdos
	FwBlock4Key = tcFwBlock4Key
	FwBlock6Key = tcFwBlock6Key
	FwRateKey   = tcFwRateKey
	FwRateVal   = tcFwRateVal
	// FwResolvedKey and FwResolvedVal are xlane_fw_resolved's: a
	// destination an endpoint resolved for a rule's names, and until when.
	FwResolvedKey = tcFwResolvedKey
	FwResolvedVal = tcFwResolvedVal
)

// Firewall constants from abi.h.
const (
	FwFieldCtx   = uint8(tcFwFieldFW_F_CTX)
	FwFieldSMAC  = uint8(tcFwFieldFW_F_SMAC)
	FwFieldDMAC  = uint8(tcFwFieldFW_F_DMAC)
	FwFieldSrc   = uint8(tcFwFieldFW_F_SRC)
	FwFieldDst   = uint8(tcFwFieldFW_F_DST)
	FwFieldProto = uint8(tcFwFieldFW_F_PROTO)
	FwFieldSport = uint8(tcFwFieldFW_F_SPORT)
	FwFieldDport = uint8(tcFwFieldFW_F_DPORT)
	FwFieldFlags = uint8(tcFwFieldFW_F_FLAGS)
	FwFieldMax   = int(tcFwFieldFW_F_MAX)

	FwKindFromEP = uint8(tcFwKindFW_KIND_FROM_EP)
	FwKindToEP   = uint8(tcFwKindFW_KIND_TO_EP)
	FwKindUplink = uint8(tcFwKindFW_KIND_UPLINK)

	FwAllow  = uint8(tcFwActionFW_ALLOW)
	FwDrop   = uint8(tcFwActionFW_DROP)
	FwReject = uint8(tcFwActionFW_REJECT)
	FwLog    = uint8(tcFwActionFW_LOG)
	FwPass   = uint8(tcFwActionFW_PASS)

	FwMaxRules    = int(tcFwLimitsFW_MAX_RULES)
	FwWords       = int(tcFwLimitsFW_WORDS)
	FwSumWords    = int(tcFwLimitsFW_SUM_WORDS)
	FwMaxLogRules = int(tcFwLimitsFW_MAX_LOG_RULES)
	FwMaxPassTo   = int(tcFwLimitsFW_MAX_PASS_TARGETS)
	FwMaxResolved = int(tcFwLimitsFW_MAX_RESOLVED)
	FwLinMax      = int(tcFwLimitsFW_LIN_MAX)
	FwScSport     = uint32(tcFwLimitsFW_SC_SPORT)
	FwScDport     = uint32(tcFwLimitsFW_SC_DPORT)
	FwScProto     = uint32(tcFwLimitsFW_SC_PROTO)
	FwScFlags     = uint32(tcFwLimitsFW_SC_FLAGS)
	FwScSize      = uint32(tcFwLimitsFW_SC_SIZE)
	FwNoL4        = uint32(tcFwLimitsFW_NO_L4)
	FwClassAll    = uint32(tcFwLimitsFW_CLASS_ALL)
	FwAddrV6      = uint8(tcFwLimitsFW_ADDR_V6)
	FwExactTuple4 = uint8(tcFwLimitsFW_EXACT_TUPLE4)
	// FwTuple4Max bounds the uplink's IPv4 tuples of a set (the
	// compiler's choice; the datapath has no limit of its own).
	FwTuple4Max = 65536
	// FwCtxNoUplink is FW_CTX_NO_UPLINK (a #define in bpf/lib/abi.h):
	// FwGen.AnyClass[FwFieldCtx] of a set without uplink rules.
	FwCtxNoUplink = ^uint32(0)
	// FwClassNone is FW_CLASS_NONE: a scalar array's class for a value
	// no rule's field contains.
	FwClassNone = ^uint32(0)

	FwDdosBlocklist = uint32(tcFwDdosFlagsFW_DDOS_BLOCKLIST)
	FwDdosRate      = uint32(tcFwDdosFlagsFW_DDOS_RATE)
	FwDdosSYN       = uint32(tcFwDdosFlagsFW_DDOS_SYN)
	FwDdosMalformed = uint32(tcFwDdosFlagsFW_DDOS_MALFORMED)
)

// FwMaps are the firewall's maps (bpf/lib/fw.h), shared by every program.
type FwMaps struct {
	// Outer arrays of maps, one slot per generation (0, 1).
	Exact, Addr, Scalar, Pool, Rules *ebpf.Map
	Gens, State, Counters, Events    *ebpf.Map
	DDoS, Block4, Block6, Rate       *ebpf.Map
	// Resolved: the destinations endpoints resolved for the rules
	// with dst_names (internal/fqdn).
	Resolved *ebpf.Map
}

// Firewall returns the firewall's maps.
func (o *Objects) Firewall() FwMaps {
	return FwMaps{
		Exact: o.XlaneFwExact, Addr: o.XlaneFwAddr, Scalar: o.XlaneFwScalar,
		Pool: o.XlaneFwPool, Rules: o.XlaneFwRules, Gens: o.XlaneFwGens,
		State: o.XlaneFwState, Counters: o.XlaneFwCounters, Events: o.XlaneFwEvents,
		DDoS: o.XlaneFwDdos, Block4: o.XlaneFwBlock4, Block6: o.XlaneFwBlock6, Rate: o.XlaneFwRate,
		Resolved: o.XlaneFwResolved,
	}
}

// FwInnerSpecs are the specs of one generation's inner maps, sized for
// its content (the templates in fw.h say 1 entry).
func FwInnerSpecs() (exact, addr, scalar, pool, rules *ebpf.MapSpec, err error) {
	spec, err := loadTc()
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	get := func(name string) *ebpf.MapSpec { return spec.Maps[name].InnerMap.Copy() }
	return get("xlane_fw_exact"), get("xlane_fw_addr"), get("xlane_fw_scalar"), get("xlane_fw_pool"), get("xlane_fw_rules"), nil
}
