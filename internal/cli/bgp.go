package cli

import (
	"fmt"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

func bgpCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bgp",
		Short: "The node's BGP speaker: peers, sessions, announced and learned routes",
		Long: `xlaned started with --bgp-asn N --bgp-router-id ADDR runs a BGP speaker (GoBGP,
embedded). It announces this node's pod CIDRs and every service VIP inside an
LB pool (xlane lb-pool) while the service has a backend taking new flows, to
every peer added here. An IPv4 peer's session carries IPv4 routes, an IPv6
peer's IPv6 routes; the next hop is the node's address on the session.
Sessions use graceful restart: a restart or kill -9 of xlaned leaves the
routes in the peers for --bgp-restart-time (the datapath keeps serving).
docs/bgp.md has the router's side (FRR, BIRD).`,
	}
	var p model.BGPPeer
	var port, multihop int
	add := &cobra.Command{
		Use:   "add ADDR --asn N",
		Short: "Add a peer: a router this node keeps a BGP session with",
		Example: `  xlane bgp peer add 192.0.2.1 --asn 65000
  xlane bgp peer add fd00:2::1 --asn 65000 --password s3cret --hold-time 9
  xlane bgp peer add 198.51.100.1 --asn 65100 --multihop 4 --bfd`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := netip.ParseAddr(args[0])
			if err != nil {
				return model.Fieldf("address", "%q: not an IP address", args[0])
			}
			if port < 0 || port > 65535 {
				return model.Fieldf("port", "%d: want 1-65535 (0: 179)", port)
			}
			if multihop < 0 || multihop > 255 {
				return model.Fieldf("multihop", "%d: want a TTL 1-255 (0: directly connected)", multihop)
			}
			p.Address, p.Port, p.Multihop = a, uint16(port), uint8(multihop)
			out, err := e.client().AddBGPPeer(cmd.Context(), p)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) { bgpPeerTable(w, []model.BGPPeer{*out}) })
		},
	}
	add.Flags().Uint32Var(&p.ASN, "asn", 0, "the peer's AS number (required; the same as --bgp-asn for iBGP)")
	add.Flags().StringVar(&p.Password, "password", "", "TCP MD5 key (RFC 2385) the router has for this node")
	add.Flags().IntVar(&multihop, "multihop", 0, "eBGP multihop: the TTL for a peer more than one hop away (0: directly connected)")
	add.Flags().BoolVar(&p.BFD, "bfd", false, "run BFD (GoBGP's, 1 s x 3, single hop) while the session is up, so a lost peer is noticed in about 3 s, not after the hold time; the router needs BFD for this neighbor too (FRR: neighbor ADDR bfd); a restart of xlaned then withdraws the routes (docs/bgp.md)")
	add.Flags().IntVar(&p.HoldTime, "hold-time", 0, "the BGP hold time in seconds, 3-65535 (0: 90); keepalives every third of it")
	add.Flags().IntVar(&port, "port", 0, "the peer's TCP port (0: 179)")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List peers",
		Example: `  xlane bgp peer ls`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := e.client().BGPPeers(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(ps, func(w *tabwriter.Writer) { bgpPeerTable(w, ps) })
		},
	}
	rm := &cobra.Command{
		Use:     "rm ADDR...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove peers (the session ends with a Cease: the router drops this node's routes)",
		Example: `  xlane bgp peer rm 192.0.2.1`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if err := e.client().RemoveBGPPeer(cmd.Context(), a); err != nil {
					return err
				}
			}
			return nil
		},
	}
	peer := &cobra.Command{Use: "peer", Short: "Add, list and remove BGP peers"}
	peer.AddCommand(add, ls, rm)
	status := &cobra.Command{
		Use:   "status",
		Short: "Sessions (state, uptime, prefixes sent and received) and the routes announced and learned",
		Example: `  xlane bgp status
  xlane bgp status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := e.client().BGPStatus(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(st, func(w *tabwriter.Writer) { bgpStatusTable(w, st) })
		},
	}
	cmd.AddCommand(peer, status)
	return cmd
}

func bgpPeerTable(w *tabwriter.Writer, ps []model.BGPPeer) {
	fmt.Fprintln(w, "ADDRESS\tASN\tPORT\tMULTIHOP\tBFD\tHOLD TIME\tPASSWORD\tSOURCE")
	for _, p := range ps {
		port := "179"
		if p.Port != 0 {
			port = fmt.Sprint(p.Port)
		}
		hold := "90"
		if p.HoldTime != 0 {
			hold = fmt.Sprint(p.HoldTime)
		}
		pw := "-"
		if p.Password != "" {
			pw = "set"
		}
		src := "cli"
		if p.Source != "" {
			src = p.Source
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%v\t%s\t%s\t%s\n", p.Address, p.ASN, port, p.Multihop, p.BFD, hold, pw, src)
	}
}

func bgpStatusTable(w *tabwriter.Writer, st *api.BGPStatus) {
	if !st.Enabled {
		fmt.Fprintln(w, "bgp:\toff (xlaned --bgp-asn N --bgp-router-id ADDR runs a speaker)")
		return
	}
	fmt.Fprintf(w, "asn:\t%d\nrouter id:\t%s\non stop:\t%s (restart time %ds)\n", st.ASN, st.RouterID, st.Stop, st.RestartTime)
	if st.LastError != "" {
		fmt.Fprintf(w, "last error:\t%s\n", st.LastError)
	}
	fmt.Fprintln(w, "\nPEER\tASN\tSTATE\tUPTIME\tSENT\tRECEIVED\tACCEPTED\tFLAPS\tGR\tBFD\tLAST DOWN")
	for _, p := range st.Peers {
		up, state, gr := "-", p.State, "-"
		if p.State == "established" {
			up = (time.Duration(p.Uptime) * time.Second).String()
			gr = "no"
			if p.GracefulRestart {
				gr = "yes"
			}
		}
		if !p.RetryAt.IsZero() {
			state += fmt.Sprintf(" (retry in %s)", max(time.Until(p.RetryAt), 0).Round(time.Second))
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Address, p.ASN, state, up, p.Sent, p.Received, p.Accepted, p.Flaps,
			gr, dash(p.BFDState), dash(p.LastDown))
	}
	fmt.Fprintln(w, "\nANNOUNCED\tWHY\tCOMMUNITIES\tMED")
	for _, r := range st.Announced {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", r.Prefix, r.Why, dash(strings.Join(r.Communities, " ")), r.MED)
	}
	if len(st.Learned) > 0 {
		fmt.Fprintln(w, "\nLEARNED\tNEXT HOP\tFROM")
		for _, r := range st.Learned {
			fmt.Fprintf(w, "%s\t%s\t%s\n", r.Prefix, r.NextHop, r.Why)
		}
	}
}

func lbPoolCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lb-pool",
		Short: "LoadBalancer address pools: what Kubernetes Services get, what BGP announces",
		Long: `A pool is a set of prefixes of LoadBalancer addresses. In Kubernetes mode
xlaned hands their addresses to Services of type LoadBalancer
(status.loadBalancer.ingress); the BGP speaker (xlaned --bgp-asn) announces
every service VIP inside a pool as a host route. Pools never overlap.`,
	}
	var p model.LBPool
	var cidrs []string
	create := &cobra.Command{
		Use:   "create NAME --cidr CIDR...",
		Short: "Create a pool",
		Example: `  xlane lb-pool create public --cidr 203.0.113.0/28 --cidr 2001:db8:113::/120
  xlane lb-pool create edge --cidr 198.51.100.0/27 --community 65000:100 --community no-export --med 50`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p.Name, p.CIDRs = args[0], nil
			for _, c := range cidrs {
				pfx, err := netip.ParsePrefix(c)
				if err != nil {
					return model.Fieldf("cidrs", "%q: not a prefix (want ADDR/BITS)", c)
				}
				p.CIDRs = append(p.CIDRs, pfx)
			}
			out, err := e.client().CreateLBPool(cmd.Context(), p)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				lbPoolTable(w, []api.LBPoolInfo{{LBPool: *out}})
			})
		},
	}
	create.Flags().StringSliceVar(&cidrs, "cidr", nil, "a prefix of the pool (repeatable; IPv4 /8 or longer, IPv6 /64 or longer)")
	create.Flags().StringSliceVar(&p.Communities, "community", nil, "a BGP community on the pool's announcements: AS:VALUE, no-export, no-advertise (repeatable)")
	create.Flags().Uint32Var(&p.MED, "med", 0, "the MED of the pool's announcements (0: none)")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List pools with the addresses in use",
		Example: `  xlane lb-pool ls`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := e.client().LBPools(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(ps, func(w *tabwriter.Writer) { lbPoolTable(w, ps) })
		},
	}
	rm := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove pools (services keep their addresses; BGP stops announcing them)",
		Example: `  xlane lb-pool rm public`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := e.client().RemoveLBPool(cmd.Context(), n); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(create, ls, rm)
	return cmd
}

func lbPoolTable(w *tabwriter.Writer, ps []api.LBPoolInfo) {
	fmt.Fprintln(w, "NAME\tCIDRS\tSIZE\tUSED\tCOMMUNITIES\tMED")
	for _, p := range ps {
		var cs []string
		for _, c := range p.CIDRs {
			cs = append(cs, c.String())
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%d\n", p.Name, strings.Join(cs, ","), p.Size, len(p.Used), dash(strings.Join(p.Communities, " ")), p.MED)
	}
}

// dash is s, or "-" for "".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
