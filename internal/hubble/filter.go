package hubble

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	flowpb "github.com/cilium/cilium/api/v1/flow"
)

// filterFunc tests one condition of a FlowFilter on a flow.
type filterFunc func(*flowpb.Flow) bool

// flowFilter is a FlowFilter compiled: every condition must hold.
type flowFilter []filterFunc

// filters is a whitelist or blacklist: one of its filters must match.
type filters []flowFilter

func (fs filters) any(f *flowpb.Flow) bool {
	return slices.ContainsFunc(fs, func(ff flowFilter) bool { return ff.match(f) })
}

func (ff flowFilter) match(f *flowpb.Flow) bool {
	for _, fn := range ff {
		if !fn(f) {
			return false
		}
	}
	return true
}

// compileFilters compiles a request's list; errors name the bad field as
// the FlowFilter's JSON does (list: whitelist or blacklist).
func compileFilters(list string, in []*flowpb.FlowFilter) (filters, error) {
	out := make(filters, 0, len(in))
	for i, ff := range in {
		c, err := compileFilter(ff)
		if err != nil {
			return nil, fmt.Errorf("%s[%d].%w", list, i, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// unfilled are FlowFilter fields on what xlane's flows never carry (no L7,
// no DNS names, no cluster names, no tracing): refused rather than
// matching nothing, so that a query says why it shows no flow.
func unfilled(ff *flowpb.FlowFilter) string {
	switch {
	case len(ff.GetUuid()) > 0:
		return "uuid"
	case len(ff.GetSourceFqdn()) > 0:
		return "source_fqdn"
	case len(ff.GetDestinationFqdn()) > 0:
		return "destination_fqdn"
	case len(ff.GetHttpStatusCode()) > 0, len(ff.GetHttpMethod()) > 0, len(ff.GetHttpPath()) > 0,
		len(ff.GetHttpUrl()) > 0, len(ff.GetHttpHeader()) > 0:
		return "http_*"
	case len(ff.GetDnsQuery()) > 0:
		return "dns_query"
	case len(ff.GetTraceId()) > 0, len(ff.GetIpTraceId()) > 0:
		return "trace_id"
	case len(ff.GetSourceClusterName()) > 0, len(ff.GetDestinationClusterName()) > 0:
		return "cluster_name"
	case len(ff.GetNodeLabels()) > 0:
		return "node_labels"
	case len(ff.GetEncrypted()) > 0:
		return "encrypted"
	case len(ff.GetExperimental().GetCelExpression()) > 0:
		return "experimental.cel_expression"
	}
	return ""
}

func compileFilter(ff *flowpb.FlowFilter) (flowFilter, error) {
	if f := unfilled(ff); f != "" {
		return nil, fmt.Errorf("%s: xlane's flows do not carry this field (docs/observability.md, the flow fields)", f)
	}
	var out flowFilter
	add := func(field string, vals []string, mk func(string, []string) (filterFunc, error)) error {
		if len(vals) == 0 {
			return nil
		}
		fn, err := mk(field, vals)
		if err != nil {
			return err
		}
		out = append(out, fn)
		return nil
	}
	srcIP := func(f *flowpb.Flow) string { return f.GetIP().GetSource() }
	dstIP := func(f *flowpb.Flow) string { return f.GetIP().GetDestination() }
	xlIP := func(f *flowpb.Flow) string { return f.GetIP().GetSourceXlated() }
	srcPod := func(f *flowpb.Flow) (string, string) { return f.GetSource().GetNamespace(), f.GetSource().GetPodName() }
	dstPod := func(f *flowpb.Flow) (string, string) {
		return f.GetDestination().GetNamespace(), f.GetDestination().GetPodName()
	}
	srcSvc := func(f *flowpb.Flow) (string, string) {
		return f.GetSourceService().GetNamespace(), f.GetSourceService().GetName()
	}
	dstSvc := func(f *flowpb.Flow) (string, string) {
		return f.GetDestinationService().GetNamespace(), f.GetDestinationService().GetName()
	}
	srcPort := func(f *flowpb.Flow) (uint32, bool) { return ports(f, true) }
	dstPort := func(f *flowpb.Flow) (uint32, bool) { return ports(f, false) }
	for _, err := range []error{
		add("source_ip", ff.GetSourceIp(), ipFilter(srcIP)),
		add("source_ip_xlated", ff.GetSourceIpXlated(), ipFilter(xlIP)),
		add("destination_ip", ff.GetDestinationIp(), ipFilter(dstIP)),
		add("source_pod", ff.GetSourcePod(), nameFilter(srcPod)),
		add("destination_pod", ff.GetDestinationPod(), nameFilter(dstPod)),
		add("source_service", ff.GetSourceService(), nameFilter(srcSvc)),
		add("destination_service", ff.GetDestinationService(), nameFilter(dstSvc)),
		add("source_label", ff.GetSourceLabel(), labelFilter(func(f *flowpb.Flow) []string { return f.GetSource().GetLabels() })),
		add("destination_label", ff.GetDestinationLabel(), labelFilter(func(f *flowpb.Flow) []string { return f.GetDestination().GetLabels() })),
		add("protocol", ff.GetProtocol(), protocolFilter),
		add("source_port", ff.GetSourcePort(), portFilter(srcPort)),
		add("destination_port", ff.GetDestinationPort(), portFilter(dstPort)),
		add("node_name", ff.GetNodeName(), nodeFilter),
	} {
		if err != nil {
			return nil, err
		}
	}
	if v := ff.GetVerdict(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool { return slices.Contains(v, f.GetVerdict()) })
	}
	if v := ff.GetDropReasonDesc(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool {
			return f.GetVerdict() == flowpb.Verdict_DROPPED && slices.Contains(v, f.GetDropReasonDesc())
		})
	}
	if v := ff.GetTrafficDirection(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool { return slices.Contains(v, f.GetTrafficDirection()) })
	}
	if v := ff.GetIpVersion(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool { return f.GetIP() != nil && slices.Contains(v, f.GetIP().GetIpVersion()) })
	}
	if v := ff.GetReply(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool {
			return f.GetIsReply() != nil && slices.Contains(v, f.GetIsReply().GetValue())
		})
	}
	if v := ff.GetSourceIdentity(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool { return slices.Contains(v, f.GetSource().GetIdentity()) })
	}
	if v := ff.GetDestinationIdentity(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool { return slices.Contains(v, f.GetDestination().GetIdentity()) })
	}
	if v := ff.GetEventType(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool {
			et := f.GetEventType()
			return et != nil && slices.ContainsFunc(v, func(e *flowpb.EventTypeFilter) bool {
				return e.GetType() == et.GetType() && (!e.GetMatchSubType() || e.GetSubType() == et.GetSubType())
			})
		})
	}
	if v := ff.GetTcpFlags(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool {
			have := f.GetL4().GetTCP().GetFlags()
			return have != nil && slices.ContainsFunc(v, func(want *flowpb.TCPFlags) bool { return tcpFlagsHas(have, want) })
		})
	}
	if v := ff.GetInterface(); len(v) > 0 {
		out = append(out, func(f *flowpb.Flow) bool {
			return slices.ContainsFunc(v, func(i *flowpb.NetworkInterface) bool {
				return (i.GetName() == "" || i.GetName() == f.GetInterface().GetName()) &&
					(i.GetIndex() == 0 || i.GetIndex() == f.GetInterface().GetIndex())
			})
		})
	}
	if v := ff.GetSourceWorkload(); len(v) > 0 {
		out = append(out, workloadFilter(v, func(f *flowpb.Flow) []*flowpb.Workload { return f.GetSource().GetWorkloads() }))
	}
	if v := ff.GetDestinationWorkload(); len(v) > 0 {
		out = append(out, workloadFilter(v, func(f *flowpb.Flow) []*flowpb.Workload { return f.GetDestination().GetWorkloads() }))
	}
	return out, nil
}

// ipFilter matches an address or a prefix.
func ipFilter(get func(*flowpb.Flow) string) func(string, []string) (filterFunc, error) {
	return func(field string, vals []string) (filterFunc, error) {
		var prefixes []netip.Prefix
		for _, v := range vals {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				a, aerr := netip.ParseAddr(v)
				if aerr != nil {
					return nil, fmt.Errorf("%s: %q is no address or prefix", field, v)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			prefixes = append(prefixes, p.Masked())
		}
		return func(f *flowpb.Flow) bool {
			a, err := netip.ParseAddr(get(f))
			return err == nil && slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
		}, nil
	}
}

// nameFilter matches NAMESPACE/NAME-PREFIX, NAMESPACE/ (the namespace) or
// NAME-PREFIX (any namespace), as Cilium's pod and service filters.
func nameFilter(get func(*flowpb.Flow) (ns, name string)) func(string, []string) (filterFunc, error) {
	return func(field string, vals []string) (filterFunc, error) {
		type nf struct{ ns, prefix string }
		var fs []nf
		for _, v := range vals {
			if v == "" {
				return nil, fmt.Errorf("%s: an empty name", field)
			}
			ns, name, ok := strings.Cut(v, "/")
			if !ok {
				ns, name = "", v
			}
			fs = append(fs, nf{ns, name})
		}
		return func(f *flowpb.Flow) bool {
			ns, name := get(f)
			if ns == "" && name == "" {
				return false
			}
			return slices.ContainsFunc(fs, func(n nf) bool {
				return (n.prefix == "" || strings.HasPrefix(name, n.prefix)) && (n.ns == "" || n.ns == ns)
			})
		}, nil
	}
}

// labelTerm is one term of a label selector: [source:]key, !key,
// key=value, key!=value.
type labelTerm struct {
	source, key, value string
	op                 string // "exists", "!exists", "=", "!="
}

// labelFilter matches label selectors (comma-separated terms, all of
// which must hold); a key without a source ("app") matches any source
// ("k8s:app", "xlane:app").
func labelFilter(get func(*flowpb.Flow) []string) func(string, []string) (filterFunc, error) {
	return func(field string, vals []string) (filterFunc, error) {
		var sels [][]labelTerm
		for _, v := range vals {
			var sel []labelTerm
			for _, t := range strings.Split(v, ",") {
				t = strings.TrimSpace(t)
				var lt labelTerm
				switch {
				case t == "":
					return nil, fmt.Errorf("%s: %q: an empty term", field, v)
				case strings.Contains(t, "!="):
					lt.key, lt.value, _ = strings.Cut(t, "!=")
					lt.op = "!="
				case strings.Contains(t, "="):
					lt.key, lt.value, _ = strings.Cut(t, "=")
					lt.value = strings.TrimPrefix(lt.value, "=")
					lt.op = "="
				case strings.HasPrefix(t, "!"):
					lt.key, lt.op = t[1:], "!exists"
				default:
					lt.key, lt.op = t, "exists"
				}
				if strings.ContainsAny(lt.key, " ()") || strings.ContainsAny(lt.value, " ()") {
					return nil, fmt.Errorf("%s: %q: only key, !key, key=value and key!=value terms", field, v)
				}
				if src, key, ok := strings.Cut(lt.key, ":"); ok {
					lt.source, lt.key = src, key
				}
				if lt.key == "" {
					return nil, fmt.Errorf("%s: %q: a term without a key", field, v)
				}
				sel = append(sel, lt)
			}
			sels = append(sels, sel)
		}
		return func(f *flowpb.Flow) bool {
			labels := get(f)
			return slices.ContainsFunc(sels, func(sel []labelTerm) bool {
				for _, t := range sel {
					found, eq := false, false
					for _, l := range labels {
						src, kv, ok := strings.Cut(l, ":")
						if !ok {
							src, kv = "", l
						}
						k, val, _ := strings.Cut(kv, "=")
						if k != t.key || (t.source != "" && t.source != "any" && t.source != src) {
							continue
						}
						found = true
						eq = eq || val == t.value
					}
					switch t.op {
					case "exists":
						if !found {
							return false
						}
					case "!exists":
						if found {
							return false
						}
					case "=":
						if !eq {
							return false
						}
					case "!=":
						if eq {
							return false
						}
					}
				}
				return true
			})
		}, nil
	}
}

func protocolFilter(field string, vals []string) (filterFunc, error) {
	var want []string
	for _, v := range vals {
		switch p := strings.ToLower(v); p {
		case "tcp", "udp", "icmpv4", "icmpv6":
			want = append(want, p)
		case "icmp":
			want = append(want, "icmpv4", "icmpv6")
		default:
			return nil, fmt.Errorf("%s: %q: xlane's flows are tcp, udp, icmp, icmpv4 or icmpv6", field, v)
		}
	}
	return func(f *flowpb.Flow) bool {
		var p string
		switch f.GetL4().GetProtocol().(type) {
		case *flowpb.Layer4_TCP:
			p = "tcp"
		case *flowpb.Layer4_UDP:
			p = "udp"
		case *flowpb.Layer4_ICMPv4:
			p = "icmpv4"
		case *flowpb.Layer4_ICMPv6:
			p = "icmpv6"
		}
		return p != "" && slices.Contains(want, p)
	}, nil
}

// ports are a flow's source (src) or destination port.
func ports(f *flowpb.Flow, src bool) (uint32, bool) {
	l4 := f.GetL4()
	switch {
	case l4.GetTCP() != nil:
		if src {
			return l4.GetTCP().GetSourcePort(), true
		}
		return l4.GetTCP().GetDestinationPort(), true
	case l4.GetUDP() != nil:
		if src {
			return l4.GetUDP().GetSourcePort(), true
		}
		return l4.GetUDP().GetDestinationPort(), true
	}
	return 0, false
}

func portFilter(get func(*flowpb.Flow) (uint32, bool)) func(string, []string) (filterFunc, error) {
	return func(field string, vals []string) (filterFunc, error) {
		var want []uint32
		for _, v := range vals {
			p, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is no port (0-65535)", field, v)
			}
			want = append(want, uint32(p))
		}
		return func(f *flowpb.Flow) bool {
			p, ok := get(f)
			return ok && slices.Contains(want, p)
		}, nil
	}
}

// nodeFilter matches node name patterns ("node-*", "cluster/node").
func nodeFilter(field string, vals []string) (filterFunc, error) {
	var pats []string
	for _, v := range vals {
		if _, name, ok := strings.Cut(v, "/"); ok {
			v = name
		}
		if _, err := path.Match(v, ""); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", field, v, err)
		}
		pats = append(pats, v)
	}
	return func(f *flowpb.Flow) bool {
		return slices.ContainsFunc(pats, func(p string) bool {
			ok, _ := path.Match(p, f.GetNodeName())
			return ok
		})
	}, nil
}

func tcpFlagsHas(have, want *flowpb.TCPFlags) bool {
	return (!want.GetFIN() || have.GetFIN()) && (!want.GetSYN() || have.GetSYN()) && (!want.GetRST() || have.GetRST()) &&
		(!want.GetPSH() || have.GetPSH()) && (!want.GetACK() || have.GetACK()) && (!want.GetURG() || have.GetURG()) &&
		(!want.GetECE() || have.GetECE()) && (!want.GetCWR() || have.GetCWR()) && (!want.GetNS() || have.GetNS())
}

func workloadFilter(want []*flowpb.Workload, get func(*flowpb.Flow) []*flowpb.Workload) filterFunc {
	return func(f *flowpb.Flow) bool {
		return slices.ContainsFunc(get(f), func(w *flowpb.Workload) bool {
			return slices.ContainsFunc(want, func(x *flowpb.Workload) bool {
				return (x.GetName() == "" || x.GetName() == w.GetName()) && (x.GetKind() == "" || x.GetKind() == w.GetKind())
			})
		})
	}
}
