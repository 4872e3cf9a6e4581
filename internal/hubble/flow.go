package hubble

import (
	"net/netip"
	"strings"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Cilium's monitor message types (pkg/monitor/api), which Flow.event_type
// carries and `hubble observe --type` filters on.
const (
	msgDrop          = 1
	msgTrace         = 4
	msgPolicyVerdict = 5
)

// Cilium's trace observation points as event_type sub-types
// (pkg/monitor/api TraceTo*, TraceFrom*).
const (
	traceToEndpoint   = 0
	traceFromEndpoint = 5
	traceFromNetwork  = 10
	traceToNetwork    = 11
	traceToStack      = 3
)

// policyMatchL3L4 is Cilium's PolicyMatchL3L4: xlane's firewall rules
// match addresses and ports.
const policyMatchL3L4 = 2

// dropReasons maps xlane's drop reasons (enum xl_reason) onto Hubble's.
// A reason not here is DROP_REASON_UNKNOWN (docs/hubble.md).
var dropReasons = map[string]flowpb.DropReason{
	"drop_no_backend":  flowpb.DropReason_SERVICE_BACKEND_NOT_FOUND,
	"drop_malformed":   flowpb.DropReason_INVALID_PACKET_DROPPED,
	"drop_spoofed":     flowpb.DropReason_INVALID_SOURCE_IP,
	"drop_fw":          flowpb.DropReason_POLICY_DENIED,
	"drop_fw_default":  flowpb.DropReason_POLICY_DENIED,
	"drop_fw_reject":   flowpb.DropReason_POLICY_DENIED,
	"drop_icc":         flowpb.DropReason_POLICY_DENIED,
	"drop_isolated":    flowpb.DropReason_POLICY_DENIED,
	"drop_unsolicited": flowpb.DropReason_POLICY_DENIED,
	"drop_blocklist":   flowpb.DropReason_POLICY_DENY,
	"drop_rate_limit":  flowpb.DropReason_DROP_RATE_LIMITED,
	"drop_syn_limit":   flowpb.DropReason_DROP_RATE_LIMITED,
	"drop_vlan":        flowpb.DropReason_VLAN_FILTERED,
	"drop_vni":         flowpb.DropReason_INVALID_VNI,
	"drop_no_peer":     flowpb.DropReason_NO_TUNNEL_OR_ENCAPSULATION_ENDPOINT,
	"drop_peer_down":   flowpb.DropReason_NO_TUNNEL_OR_ENCAPSULATION_ENDPOINT,
	"drop_no_xsk":      flowpb.DropReason_DROP_EP_NOT_READY,
	"drop_redirect":    flowpb.DropReason_ERROR_WRITING_TO_PACKET,
	"drop_too_big":     flowpb.DropReason_INVALID_PACKET_DROPPED,
	"drop_unencrypted": flowpb.DropReason_UNENCRYPTED_TRAFFIC,
}

// observation is where the datapath saw the event (Flow's
// trace_observation_point, its event_type sub-type and direction).
func observation(r *record, src, dst *identity) (flowpb.TraceObservationPoint, int32, flowpb.TrafficDirection) {
	hook := r.hook
	if hook == "" { // flow events carry no hook: which side is ours
		switch {
		case src != nil && src.endpoint != "" && src.gone.IsZero():
			hook = "from_endpoint"
		case dst != nil && dst.endpoint != "":
			hook = "to_endpoint"
		default:
			hook = "uplink"
		}
	}
	switch hook {
	case "from_endpoint":
		return flowpb.TraceObservationPoint_FROM_ENDPOINT, traceFromEndpoint, flowpb.TrafficDirection_EGRESS
	case "to_endpoint":
		return flowpb.TraceObservationPoint_TO_ENDPOINT, traceToEndpoint, flowpb.TrafficDirection_INGRESS
	case "socket":
		return flowpb.TraceObservationPoint_TO_STACK, traceToStack, flowpb.TrafficDirection_EGRESS
	}
	return flowpb.TraceObservationPoint_FROM_NETWORK, traceFromNetwork, flowpb.TrafficDirection_INGRESS
}

// toFlow builds the Flow of a record, naming its addresses now.
func (s *Server) toFlow(r *record) *flowpb.Flow {
	src, dst := s.ids.lookup(r.src), s.ids.lookup(r.dst)
	if (r.kind == kindLB || (r.kind == kindNAT && !r.natSrc)) && r.xlated.IsValid() {
		// After the translation: the backend is the destination.
		dst = s.ids.lookup(r.xlated.Addr())
	}
	f := &flowpb.Flow{
		Time:     timestamppb.New(time.Unix(0, r.time)),
		Type:     flowpb.FlowType_L3_L4,
		NodeName: s.cfg.NodeName,
		Emitter:  &flowpb.Emitter{Name: "xlane", Version: s.cfg.Version},
	}
	if r.src.IsValid() || r.dst.IsValid() {
		ip := &flowpb.IP{Source: addrString(r.src), Destination: addrString(r.dst), IpVersion: flowpb.IPVersion_IPv4}
		if r.dst.Is6() && !r.dst.Is4In6() {
			ip.IpVersion = flowpb.IPVersion_IPv6
		}
		f.IP = ip
	}
	sport, dport := r.sport, r.dport
	if r.kind == kindLB && r.xlated.IsValid() {
		f.IP.Destination = r.xlated.Addr().String()
		dport = r.xlated.Port()
	}
	if r.kind == kindNAT && r.xlated.IsValid() {
		if r.natSrc {
			f.IP.SourceXlated = r.xlated.Addr().String()
		} else {
			f.IP.Destination = r.xlated.Addr().String()
			dport = r.xlated.Port()
		}
	}
	f.L4 = layer4(r, sport, dport)
	f.Source = s.endpoint(src, r.src)
	f.Destination = s.endpoint(dst, r.dst)
	point, sub, dir := observation(r, src, dst)
	f.TraceObservationPoint = point
	f.TrafficDirection = dir
	if r.device != "" {
		f.Interface = &flowpb.NetworkInterface{Name: r.device}
	}
	switch r.kind {
	case kindDrop:
		f.Verdict = flowpb.Verdict_DROPPED
		reason := dropReasons[r.reason]
		f.DropReasonDesc = reason
		f.DropReason = uint32(reason)
		f.EventType = &flowpb.CiliumEventType{Type: msgDrop, SubType: int32(reason)}
		if r.rule != "" {
			pol := []*flowpb.Policy{{Name: r.rule, Kind: "xlane-fw"}}
			if dir == flowpb.TrafficDirection_EGRESS {
				f.EgressDeniedBy = pol
			} else {
				f.IngressDeniedBy = pol
			}
		}
	case kindFW:
		f.EventType = &flowpb.CiliumEventType{Type: msgPolicyVerdict}
		f.PolicyMatchType = policyMatchL3L4
		pol := []*flowpb.Policy{{Name: r.rule, Kind: "xlane-fw"}}
		if r.action == "drop" || r.action == "reject" {
			f.Verdict = flowpb.Verdict_DROPPED
			f.DropReasonDesc = flowpb.DropReason_POLICY_DENIED
			f.DropReason = uint32(f.DropReasonDesc)
			if dir == flowpb.TrafficDirection_EGRESS {
				f.EgressDeniedBy = pol
			} else {
				f.IngressDeniedBy = pol
			}
		} else {
			f.Verdict = flowpb.Verdict_FORWARDED
			if r.action == "log" {
				f.Verdict = flowpb.Verdict_AUDIT
			}
			if dir == flowpb.TrafficDirection_EGRESS {
				f.EgressAllowedBy = pol
			} else {
				f.IngressAllowedBy = pol
			}
		}
	case kindFlowNew:
		f.Verdict = flowpb.Verdict_FORWARDED
		f.EventType = &flowpb.CiliumEventType{Type: msgTrace, SubType: sub}
		f.TraceReason = flowpb.TraceReason_NEW
		f.IsReply = wrapperspb.Bool(false)
	case kindNAT, kindLB:
		f.Verdict = flowpb.Verdict_TRANSLATED
		f.EventType = &flowpb.CiliumEventType{Type: msgTrace, SubType: sub}
		f.IsReply = wrapperspb.Bool(false)
		if r.kind == kindLB && r.service != "" {
			f.DestinationService = service(s.ids.service(r.service), dst)
		}
	}
	return f
}

// service splits an xlane service name into Hubble's namespace and name:
// Kubernetes mode names them k8s.NAMESPACE.NAME.PORT.VIP (internal/k8s;
// neither a namespace nor a Service name has a dot); the rest are the
// service's own name, in the namespace of the backend picked (backend:
// its network; hubble prints a service's namespace for the pod's).
func service(name string, backend *identity) *flowpb.Service {
	if rest, ok := strings.CutPrefix(name, "k8s."); ok {
		if p := strings.Split(rest, "."); len(p) >= 2 {
			return &flowpb.Service{Namespace: p[0], Name: p[1]}
		}
	}
	s := &flowpb.Service{Name: name}
	if backend != nil {
		s.Namespace = backend.namespace
	}
	return s
}

// endpoint is Flow's view of an address' identity (world when unknown).
func (s *Server) endpoint(id *identity, a netip.Addr) *flowpb.Endpoint {
	if !a.IsValid() {
		return nil
	}
	if id == nil {
		return &flowpb.Endpoint{Identity: identityWorld, Labels: []string{"reserved:world"}}
	}
	e := &flowpb.Endpoint{ID: id.epID, Identity: id.numeric, Namespace: id.namespace, PodName: id.name,
		Labels: id.labels}
	if id.workload[1] != "" {
		e.Workloads = []*flowpb.Workload{{Kind: id.workload[0], Name: id.workload[1]}}
	}
	return e
}

func layer4(r *record, sport, dport uint16) *flowpb.Layer4 {
	switch r.proto {
	case 6:
		tcp := &flowpb.TCP{SourcePort: uint32(sport), DestinationPort: uint32(dport)}
		if r.kind == kindFlowNew && r.action == "new" {
			// conntrack creates a TCP flow on its first packet, a SYN.
			tcp.Flags = &flowpb.TCPFlags{SYN: true}
		}
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_TCP{TCP: tcp}}
	case 17:
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_UDP{UDP: &flowpb.UDP{SourcePort: uint32(sport), DestinationPort: uint32(dport)}}}
	case 1:
		icmp := &flowpb.ICMPv4{}
		if r.icmp {
			icmp.Type, icmp.Code = uint32(r.icmpType), uint32(r.icmpCode)
		}
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_ICMPv4{ICMPv4: icmp}}
	case 58:
		icmp := &flowpb.ICMPv6{}
		if r.icmp {
			icmp.Type, icmp.Code = uint32(r.icmpType), uint32(r.icmpCode)
		}
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_ICMPv6{ICMPv6: icmp}}
	}
	return nil
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
