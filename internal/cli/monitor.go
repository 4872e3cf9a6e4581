package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
)

func monitorCmd(e *env) *cobra.Command {
	var (
		q     api.MonitorQuery
		types string
		count int
	)
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Show the datapath's events live: drops, firewall verdicts, flows, NAT, backends, BGP",
		Long: `monitor prints what the BPF programs report while it runs, one line per
event (one JSON object per line with -o json):

  drop        a packet dropped, with its reason and 5-tuple (and the
              firewall rule that refused it)
  fw          a firewall rule decided a packet (allow, drop, reject)
  flow_new    conntrack created a flow; flow_close: a TCP flow closed
  nat         a new flow is translated (masquerade, published port, service)
  lb          a service VIP picked a backend (in a program, or at connect())
  verdict     every packet's final verdict: heavy, not on by default
  bgp         the BGP speaker (xlaned --bgp-asn): a session up, down or
              failed (with why), a prefix advertised or withdrawn

The programs emit events only while a monitor listens (the last one to
leave switches them off) and at most --monitor-rate per second per CPU
(xlaned's flag): every second a "stats" line counts what was suppressed by
that limit, lost to a full ring, or dropped because this client read too
slowly. Filters apply in the daemon. With xlaned --hubble, each address is
followed by its workload's name as Hubble gives it (NAMESPACE/POD in
Kubernetes mode, NETWORK/ENDPOINT elsewhere, host; src_name, dst_name and
nat_dst_name with -o json).`,
		Example: `  xlane monitor                                 # every type but verdict
  xlane monitor -t drop --reason drop_fw,drop_fw_default -o json
  xlane monitor --endpoint web1 --port 443 --proto tcp
  xlane monitor --network blue -t flow_new,flow_close,nat
  xlane monitor -t bgp                          # BGP sessions and announcements`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if types != "" {
				q.Types = strings.Split(types, ",")
			}
			if e.output != "json" && e.output != "table" && e.output != "" {
				return fmt.Errorf("--output %q: want table or json", e.output)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			// Events arrive in batches (the daemon flushes every 100 ms):
			// written out through a buffer flushed once per batch, and with
			// -o json as the daemon wrote them, not decoded and encoded again.
			out := bufio.NewWriter(e.out)
			defer out.Flush()
			n := 0
			err := e.client().MonitorLines(ctx, q, func(line []byte, more bool) error {
				typ := api.MonitorLineType(line)
				if e.output == "json" {
					out.Write(line)
					out.WriteByte('\n')
				} else {
					var ev api.MonitorEvent
					if err := json.Unmarshal(line, &ev); err != nil {
						return fmt.Errorf("read monitor stream: %w", err)
					}
					typ = ev.Type
					out.WriteString(monitorLine(ev))
					out.WriteByte('\n')
				}
				if typ != "stats" {
					n++
				}
				if count > 0 && n >= count {
					if err := out.Flush(); err != nil {
						return err
					}
					return errStop
				}
				if !more {
					return out.Flush()
				}
				return nil
			})
			if errors.Is(err, errStop) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&types, "type", "t", "", "event types, comma-separated: drop, fw, flow_new, flow_close, nat, lb, verdict, all (default: all but verdict)")
	f.StringVar(&q.Endpoint, "endpoint", "", "only events of this endpoint (ID): its device or its addresses")
	f.StringVar(&q.Network, "network", "", "only events of this network's endpoints or subnets")
	f.StringVar(&q.Addr, "addr", "", "only events with this address or prefix as source, destination or translation")
	f.Uint16Var(&q.Port, "port", 0, "only events with this source, destination or translated port")
	f.StringVar(&q.Proto, "proto", "", "only this protocol: tcp, udp, icmp, icmpv6 or a number")
	f.StringSliceVar(&q.Reasons, "reason", nil, "only drops and verdicts with these reasons (drop_fw, drop_spoofed, ...; see xlane status)")
	f.IntVarP(&count, "count", "c", 0, "stop after this many events (0: until interrupted)")
	return cmd
}

var errStop = errors.New("enough events")

// monitorLine is one event as a line of text.
func monitorLine(ev api.MonitorEvent) string {
	ts := ev.Time.Format("15:04:05.000000")
	if ev.Type == "stats" {
		c := ev.Counters
		return fmt.Sprintf("%s stats: %d events, %d suppressed by the rate limit, %d lost (ring full), %d dropped (client too slow)",
			ts, c.Events, c.Suppressed, c.Lost, c.Dropped)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-10s", ts, ev.Type)
	if ev.Type == "bgp" { // the BGP speaker's: peer up/down/failed, prefix advertise/withdraw
		fmt.Fprintf(&b, " %s %s%s", ev.Action, ev.Peer, ev.Prefix)
		if ev.Reason != "" {
			fmt.Fprintf(&b, ": %s", ev.Reason)
		}
		return b.String()
	}
	if ev.Hook != "" {
		fmt.Fprintf(&b, " %s", ev.Hook)
	}
	if ev.Device != "" {
		fmt.Fprintf(&b, " %s", ev.Device)
	}
	if ev.Proto != "" {
		fmt.Fprintf(&b, " %s %s%s -> %s%s", ev.Proto, hostPort(ev.Src, ev.SrcPort), named(ev.SrcName), hostPort(ev.Dst, ev.DstPort), named(ev.DstName))
	}
	if ev.ICMP != "" {
		fmt.Fprintf(&b, " (%s)", ev.ICMP)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, " %s: %s", ev.Verdict, ev.Reason)
	}
	if ev.Rule != "" {
		fmt.Fprintf(&b, " rule %s", ev.Rule)
	}
	if ev.Action != "" && ev.Type != "nat" { // nat: src-> and dst-> say it
		fmt.Fprintf(&b, " %s", ev.Action)
	}
	if ev.Service != "" {
		fmt.Fprintf(&b, " service %s backend #%d", ev.Service, ev.Backend)
	}
	if ev.NATSrc != "" {
		fmt.Fprintf(&b, " src->%s", ev.NATSrc)
	}
	if ev.NATDst != "" {
		fmt.Fprintf(&b, " dst->%s%s", ev.NATDst, named(ev.NATDstName))
	}
	if ev.Endpoint != "" {
		fmt.Fprintf(&b, " [%s %s]", ev.Network, shortID(ev.Endpoint))
	}
	return b.String()
}

// named is a workload name after its address (xlaned --hubble).
func named(name string) string {
	if name == "" {
		return ""
	}
	return " (" + name + ")"
}

func hostPort(a string, p uint16) string {
	if a == "" {
		a = "*"
	}
	if p == 0 {
		return a
	}
	if ad, err := netip.ParseAddr(a); err == nil {
		return netip.AddrPortFrom(ad, p).String()
	}
	return fmt.Sprintf("%s:%d", a, p)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
