package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
)

func networkCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "network",
		Aliases: []string{"net"},
		Short:   "Create, list, inspect and remove networks",
	}
	var req api.NetworkCreate
	create := &cobra.Command{
		Use:   "create NAME --subnet CIDR [--subnet CIDR6] [flags]",
		Short: "Create a network",
		Long: `Create a network with one IPv4 and/or one IPv6 subnet.

The gateway (default: the first address of each subnet) lives on the node,
on a device named xlnet<ID>; endpoints route everything through it.`,
		Example: `  xlane network create blue --subnet 10.10.0.0/24
  xlane network create red --subnet 10.20.0.0/24 --subnet fd00:20::/64 --mode kernel --mtu 9000
  xlane network create green --subnet 10.30.0.0/24 --device netkit   # Linux 6.7+: programs in the device
  xlane network create quiet --subnet 10.40.0.0/24 --icc=false --isolated   # like a Docker network with enable_icc=false`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			n, err := e.client().CreateNetwork(cmd.Context(), req)
			if err != nil {
				return err
			}
			return e.print(n, func(w *tabwriter.Writer) { networkTable(w, []api.NetworkInfo{*n}) })
		},
	}
	create.Flags().StringSliceVar(&req.Subnets, "subnet", nil, "subnet in CIDR form (repeat for IPv4 and IPv6); on a node of a cluster, default: this node's free pod CIDRs")
	create.Flags().StringSliceVar(&req.Gateways, "gateway", nil, "gateway address per subnet (default: first address)")
	create.Flags().StringVar(&req.Mode, "mode", "", "datapath mode: auto (default: tc, or a mode this node measured faster by a repeated margin that gives the network every feature it asks for; see xlane calibrate), tc, kernel, xdp or xdp-generic")
	create.Flags().StringVar(&req.BigTCP, "big-tcp", "", "BIG TCP (192 KiB GSO/GRO aggregates) on the endpoints' veths: auto (default: where xlane calibrate measured it faster on this node by a repeated margin), on, or off")
	create.Flags().IntVar(&req.MTU, "mtu", 0, "MTU of the endpoints' interfaces (default 1500; on a node of a vxlan cluster the underlay's less 50 (IPv4 underlay) or 70 (IPv6))")
	create.Flags().Uint16Var(&req.VLAN, "vlan", 0, "put the network on this 802.1Q VLAN of the uplink (1-4094): its hosts there reach the endpoints and, over the overlay, the network's pods on other nodes; untagged traffic does not start flows into it")
	create.Flags().Uint32Var(&req.VNI, "vni", 0, "VXLAN network identifier between nodes, 2-16777215 (default: derived from the name, the same on every node)")
	create.Flags().StringVar(&req.Device, "device", "", "endpoint device pair: veth (default), netkit (L3, no ARP; Linux 6.7+), netkit-l2, or auto (netkit where the kernel has it and the network needs neither XDP nor NAT, else veth)")
	masq := true
	create.Flags().BoolVar(&masq, "masquerade", true, "SNAT traffic leaving through the uplink to the node's address (--masquerade=false: route container addresses as they are)")
	icc := true
	create.Flags().BoolVar(&icc, "icc", true, "endpoints of the network reach each other (--icc=false: they do not, in any protocol, as Docker's enable_icc=false; the node, the outside and published ports still work; BPF modes only)")
	create.Flags().BoolVar(&req.Isolated, "isolated", false, "keep the network apart from the node's other networks: no traffic between its endpoints and theirs, as between Docker networks (the node, the outside and published ports still work; BPF modes only)")
	create.Flags().BoolVar(&req.AllowUnsolicited, "allow-unsolicited", false, "let hosts off the node open flows to any port of the endpoints (Docker's gateway_mode_ipv4=nat-unprotected); without it a packet from off the node gets in only as part of a flow an endpoint started, to a published port, or as an ICMP error about these, as on Docker's bridge, and is otherwise dropped (counted as drop_unsolicited)")
	create.PreRun = func(cmd *cobra.Command, _ []string) {
		if cmd.Flags().Changed("masquerade") {
			req.Masquerade = &masq
		}
		if cmd.Flags().Changed("icc") {
			req.ICC = &icc
		}
	}

	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List networks",
		Example: `  xlane network ls
  xlane network ls -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nets, err := e.client().Networks(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(nets, func(w *tabwriter.Writer) { networkTable(w, nets) })
		},
	}
	inspect := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a network",
		Example: `  xlane network inspect blue
  xlane network inspect blue -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := e.client().Network(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.print(n, func(w *tabwriter.Writer) {
				if n.ModeReason != "" {
					fmt.Fprintf(w, "mode chosen:\t%s (asked for %s)\n", n.ModeReason, n.ModeRequested)
				}
				fmt.Fprintf(w, "name:\t%s\nid:\t%d\nmode:\t%s\nendpoint device:\t%s\nsubnets:\t%s\ngateways:\t%s\nmtu:\t%d\ndevice:\t%s\n",
					n.Name, n.ID, n.Mode, n.Devices(), joinAny(n.Subnets), joinAny(n.Gateways), n.MTU, n.Device)
				fmt.Fprintf(w, "masquerade:\t%v\ninternal:\t%v\nicc:\t%v\nisolated:\t%v\nunsolicited:\t%s\nendpoints:\t%d\ncreated:\t%s\n",
					n.Masquerade, n.Internal, !n.ICCOff, n.Isolated, unsolicitedText(n.AllowUnsolicited), n.Endpoints, n.Created)
				if n.BigTCPReason != "" {
					fmt.Fprintf(w, "big tcp:\t%s (asked for %s)\n", n.BigTCPReason, n.BigTCP)
				}
				if n.VNI != 0 {
					fmt.Fprintf(w, "vni:\t%d\n", n.VNI)
				}
				if n.VLAN != 0 {
					fmt.Fprintf(w, "vlan:\t%d (of the uplink)\n", n.VLAN)
				}
			})
		},
	}
	var upd api.NetworkUpdate
	update := &cobra.Command{
		Use:   "update NAME --mode MODE",
		Short: "Change a network's datapath mode in place",
		Long: `Switch every endpoint of a network to another datapath mode without
recreating them. The new mode's programs are attached before the old ones are
removed, so established connections carry on.`,
		Example: `  xlane network update blue --mode xdp
  xlane network update blue --mode kernel`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := e.client().UpdateNetwork(cmd.Context(), args[0], upd)
			if err != nil {
				return err
			}
			return e.print(n, func(w *tabwriter.Writer) { networkTable(w, []api.NetworkInfo{*n}) })
		},
	}
	update.Flags().StringVar(&upd.Mode, "mode", "", "new datapath mode: auto, tc, kernel, xdp or xdp-generic")
	var force bool
	rm := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove networks (removing a missing one succeeds)",
		Example: `  xlane network rm blue
  xlane network rm blue --force   # and its endpoints`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				if err := e.client().DeleteNetwork(cmd.Context(), name, force); err != nil {
					return err
				}
			}
			return nil
		},
	}
	rm.Flags().BoolVar(&force, "force", false, "remove the network's endpoints too")
	cmd.AddCommand(create, ls, inspect, update, rm)
	return cmd
}

func networkTable(w *tabwriter.Writer, nets []api.NetworkInfo) {
	fmt.Fprintln(w, "NAME\tMODE\tDEVICE\tSUBNETS\tGATEWAYS\tMTU\tENDPOINTS")
	for _, n := range nets {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", n.Name, n.Mode, n.Devices(), joinAny(n.Subnets), joinAny(n.Gateways), n.MTU, n.Endpoints)
	}
}

// unsolicitedText says what becomes of flows opened from off the node.
func unsolicitedText(allow bool) string {
	if allow {
		return "allowed (--allow-unsolicited: hosts off the node reach every port)"
	}
	return "dropped (from off the node: replies, published ports and related ICMP only)"
}
