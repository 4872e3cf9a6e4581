package cli

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/trace"
)

func traceCmd(e *env) *cobra.Command {
	var (
		req  api.TraceRequest
		pcap string
		hexd bool
	)
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Show what the datapath would do to a packet, without sending it",
		Long: `trace builds a packet (or reads the first one of a capture) and runs it
through the loaded BPF programs of the hook it would meet, with
BPF_PROG_TEST_RUN: the tc program of the sending endpoint's host device, or
the uplink's for a packet from off the node; a packet that program passes to
Linux for a local endpoint then meets that endpoint's egress program. It
prints each stage's decision (parse, anti-spoofing, firewall rule,
conntrack, NAT and service backend, route), the verdict and the packet as
it leaves.

Nothing is sent and the live datapath is not changed: the programs run in a
second instance that reads the live configuration (endpoints, services,
published ports, firewall rules) and a copy of the conntrack table, with
its own counters. A flow the packet would open shows as "new flow" but is
not created.`,
		Example: `  xlane trace --from web1 --to 10.10.0.3:80              # TCP SYN from an endpoint
  xlane trace --from web1 --to '[fd00:10::3]:53' --proto udp
  xlane trace --from web1 --from-ip 10.10.0.99 --to 10.10.0.3:80   # spoofed source
  xlane trace --from-ip 203.0.113.7 --to 198.51.100.1:8080          # to a published port
  xlane trace --from-ip 10.10.0.2 --to 10.96.0.10:80 --flags S      # to a service VIP
  xlane trace --pcap syn.pcap -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pcap != "" {
				f, err := os.Open(pcap)
				if err != nil {
					return fmt.Errorf("--pcap: %w", err)
				}
				defer f.Close()
				if req.Packet, err = trace.ReadPcap(f); err != nil {
					return fmt.Errorf("--pcap %s: %w", pcap, err)
				}
			} else if req.To == "" {
				return fmt.Errorf("--to: give the destination (ADDR[:PORT]), or --pcap FILE")
			}
			res, err := e.client().Trace(cmd.Context(), req)
			if err != nil {
				return err
			}
			return e.print(res, func(w *tabwriter.Writer) { printTrace(w, res, hexd) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.From, "from", "", "the sending endpoint (ID): its address, MAC and host device")
	f.StringVar(&req.FromIP, "from-ip", "", "the source address: an endpoint's (its device), one off the node (the uplink), or with --from a spoofed one")
	f.StringVar(&req.To, "to", "", "destination: ADDR, ADDR:PORT or [ADDR6]:PORT")
	f.StringVar(&req.Proto, "proto", "tcp", "tcp, udp or icmp (an echo request; icmpv6 for IPv6)")
	f.StringVar(&req.Flags, "flags", "S", "TCP flags, letters of FSRPAU (S: SYN, SA: SYN-ACK, A: ACK, ...)")
	f.Uint16Var(&req.SrcPort, "sport", 40000, "source port, or ICMP echo identifier")
	f.StringVar(&pcap, "pcap", "", "trace the first packet of this pcap/pcapng capture (Ethernet) instead")
	f.BoolVar(&hexd, "hex", false, "print the output packets in hex")
	return cmd
}

func printTrace(w *tabwriter.Writer, res *api.TraceResult, hexd bool) {
	fmt.Fprintf(w, "packet:\t%s\n", res.Input)
	for i, h := range res.Hops {
		ep := ""
		if h.Endpoint != "" {
			ep = " endpoint " + shortID(h.Endpoint)
		}
		fmt.Fprintf(w, "\n%d. %s on %s%s\n", i+1, h.Hook, h.Device, ep)
		for _, s := range h.Stages {
			fmt.Fprintf(w, "   %s\t%s\n", s.Stage, s.Result)
		}
		fmt.Fprintf(w, "   output\t%s\n", h.Output)
		if hexd {
			for _, l := range strings.Split(strings.TrimRight(hex.Dump(h.Packet), "\n"), "\n") {
				fmt.Fprintf(w, "   \t%s\n", l)
			}
		}
	}
	fmt.Fprintf(w, "\nverdict:\t%s (%s)\n", res.Verdict, res.Reason)
	for _, n := range res.Notes {
		fmt.Fprintf(w, "note:\t%s\n", n)
	}
}
