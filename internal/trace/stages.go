package trace

import (
	"fmt"
	"strings"

	"github.com/xlane-dev/xlane/internal/api"
)

// Hop is what Stages reads of one program's run.
type Hop struct {
	Hook    string             // from_endpoint, to_endpoint, from_uplink
	Events  []api.MonitorEvent // what the run's stages reported (every type on)
	Reason  string             // the run's reason (its verdict event)
	Verdict string             // pass, drop, forward, replied
	// Existing describes the conntrack entry the packet's tuple had before
	// the run ("" none).
	Existing string
	// Route says where a forwarded packet goes ("" unknown).
	Route string
}

// reasonStage tells which stage decided a reason, and how to say it.
var reasonStage = map[string][2]string{
	"drop_malformed":   {"parse", "truncated or invalid header: dropped"},
	"drop_vlan":        {"parse", "802.1Q/802.1ad tag from an endpoint: dropped"},
	"pass_non_ip":      {"parse", "not IP, or not something xlane handles here: to Linux"},
	"drop_spoofed":     {"admit", "source address or MAC is not the sender's: dropped"},
	"pass_link_local":  {"admit", "link-local, multicast or broadcast: to Linux"},
	"pass_ttl":         {"admit", "TTL would expire: to Linux, which answers with ICMP"},
	"drop_icc":         {"policy", "between endpoints of a network with ICC off: dropped"},
	"drop_isolated":    {"policy", "between an isolated network and another: dropped"},
	"drop_unsolicited": {"policy", "from off the node, in no tracked flow and to no published port: dropped"},
	"drop_no_backend":  {"nat", "a service VIP without an active backend: answered with a TCP RST or ICMP port unreachable (xlaned --service-no-backend reject, the default), or dropped"},
	"pass_untracked":   {"conntrack", "needs NAT but cannot be tracked: to Linux"},
	"pass_ct_full":     {"conntrack", "conntrack table full: to Linux, untranslated"},
	"pass_nat_ports":   {"nat", "no free masquerade port: to Linux"},
	"pass_fw":          {"route", "a new flow for an endpoint with a rule set: through Linux to the endpoint's firewall (tcx egress)"},
	"fwd_peer":         {"route", "to a local endpoint (peer redirect into its namespace)"},
	"fwd_fib":          {"route", "FIB lookup: route and neighbour known, redirected to the next hop"},
	"fwd_neigh":        {"route", "FIB lookup: route known, neighbour not: bpf_redirect_neigh resolves it"},
	"fwd_overlay":      {"route", "to another node's pod over VXLAN: encapsulated in BPF and redirected to the underlay device, or the tunnel key set and redirected to the VXLAN device"},
	"pass_overlay":     {"route", "XDP: for another node's pod: to the tc program, which tunnels it"},
	"drop_no_peer":     {"route", "an address of the cluster CIDR that no node has: dropped"},
	"drop_peer_down":   {"route", "a pod of a node that does not answer this node's probes: dropped"},
	"drop_unencrypted": {"route", "a pod of a node without a working WireGuard session, with xlaned --encryption-strict: dropped, never sent in cleartext"},
	"drop_too_big":     {"route", "too big for the overlay after a service's translation: the client answered with ICMP fragmentation needed / packet too big naming the overlay's MTU"},
	"drop_vni":         {"parse", "from the overlay with an unknown VNI: dropped"},
	"pass_not_fwded":   {"route", "not forwarded by xlane (for the node, or no route): to Linux"},
	"pass_no_route":    {"route", "blackhole, unreachable, prohibit, MTU or forwarding off: to Linux, which answers"},
	"deliver":          {"route", "delivered to the endpoint"},
	"drop_redirect":    {"route", "the redirect helper refused the packet: dropped"},
	"drop_fw":          {"firewall", ""},
	"drop_fw_default":  {"firewall", ""},
	"drop_fw_reject":   {"firewall", ""},
	"drop_blocklist":   {"firewall", "source in the uplink's blocklist: dropped"},
	"drop_rate_limit":  {"firewall", "source over its packet rate: dropped"},
	"drop_syn_limit":   {"firewall", "source over its SYN rate: dropped"},
	"pass_no_neigh":    {"route", "XDP: next hop not in xlane's neighbour table: to Linux"},
	"pass_no_target":   {"route", "XDP: no redirect target: to Linux"},
	"pass_too_big":     {"route", "XDP: larger than the egress MTU: to Linux"},
	"pass_to_tc":       {"route", "XDP: the flow needs NAT: to the tc program"},
}

// stageOrder is the pipeline's order (lib/skb_endpoint.h).
var stageOrder = []string{"parse", "admit", "firewall", "conntrack", "nat", "policy", "route", "verdict"}

// Stages tells each stage's decision from a run's events and reason:
// stages after the one that decided are not reached.
func Stages(h Hop) []api.TraceStage {
	got := map[string][]string{}
	add := func(stage, s string) { got[stage] = append(got[stage], s) }
	decided := ""
	if rs, ok := reasonStage[h.Reason]; ok {
		decided = rs[0]
		if rs[1] != "" && rs[0] != "route" {
			add(rs[0], rs[1])
		}
	}
	var drop *api.MonitorEvent
	for i := range h.Events {
		e := &h.Events[i]
		switch e.Type {
		case "fw":
			add("firewall", fmt.Sprintf("rule %s: %s", e.Rule, e.Action))
		case "flow_new":
			add("conntrack", "new flow: both entries created (state "+e.Action+")")
		case "flow_close":
			add("conntrack", "the flow closed")
		case "nat":
			var parts []string
			if e.NATDst != "" {
				parts = append(parts, "destination to "+e.NATDst)
			}
			if e.NATSrc != "" {
				parts = append(parts, "source to "+e.NATSrc)
			}
			add("nat", "new translation: "+strings.Join(parts, ", "))
		case "lb":
			add("nat", fmt.Sprintf("service %s: backend #%d %s", e.Service, e.Backend, e.NATDst))
		case "drop", "verdict":
			drop = e
		}
	}
	if strings.HasPrefix(h.Reason, "drop_fw") && len(got["firewall"]) == 0 {
		rule := "the default policy"
		if drop != nil && drop.Rule != "" {
			rule = "rule " + drop.Rule
		}
		add("firewall", rule+": "+strings.TrimPrefix(h.Reason, "drop_"))
	}
	if len(got["conntrack"]) == 0 && h.Existing != "" {
		add("conntrack", "existing flow: "+h.Existing)
	}
	var out []api.TraceStage
	for _, st := range stageOrder {
		switch {
		case st == "verdict":
			out = append(out, api.TraceStage{Stage: st, Result: h.Verdict + " (" + h.Reason + ")"})
			return out
		case st == "route":
			if decided == "route" {
				r := reasonStage[h.Reason][1]
				if h.Route != "" {
					r += ": " + h.Route
				}
				out = append(out, api.TraceStage{Stage: st, Result: r})
			}
		case len(got[st]) > 0:
			for _, r := range got[st] {
				out = append(out, api.TraceStage{Stage: st, Result: r})
			}
		case st == "admit" && h.Hook != "from_endpoint", st == "policy":
			// only when they decided
		case decided != "" && stageIndex(st) > stageIndex(decided):
			// not reached
		default:
			out = append(out, api.TraceStage{Stage: st, Result: passText[st]})
		}
		if st == decided && st != "route" {
			out = append(out, api.TraceStage{Stage: "verdict", Result: h.Verdict + " (" + h.Reason + ")"})
			return out
		}
	}
	return out
}

var passText = map[string]string{
	"parse":     "ok",
	"admit":     "source address and MAC are the endpoint's",
	"firewall":  "no rule decided (no rule set, an established flow, or no rule matching)",
	"conntrack": "no entry involved",
	"nat":       "no translation",
}

func stageIndex(s string) int {
	for i, x := range stageOrder {
		if x == s {
			return i
		}
	}
	return len(stageOrder)
}
