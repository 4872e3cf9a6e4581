package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

func nodeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "The cluster's nodes: each one's underlay address and pod CIDRs",
		Long: `Every node runs its own xlaned, started with --node-name and --cluster-cidr.
Give each daemon the same node list (this command, or xlaned --nodes FILE):
the record named like the daemon's --node-name is the node itself (its
networks take their subnets from its pod CIDRs), the others are peers whose
pod CIDRs are reached over the VXLAN overlay (xlaned --routing vxlan, the
default) or routed natively through their underlay address (--routing
native). Removing a node removes its routes, its datapath entries and the
conntrack entries of its pods' flows. docs/multinode.md has the details.`,
	}
	var req api.NodeAdd
	add := &cobra.Command{
		Use:   "add NAME --underlay ADDR --pod-cidr CIDR",
		Short: "Add a node (this one, or a peer)",
		Example: `  xlane node add n1 --underlay 192.168.50.1 --pod-cidr 10.244.1.0/24 --pod-cidr fd00:244:1::/64
  xlane node add n2 --underlay 192.168.50.2 --underlay fd00:50::2 --pod-cidr 10.244.2.0/24,fd00:244:2::/64
  xlane node add n3 --underlay 192.168.50.3 --pod-cidr 10.244.3.0/24 --wg-public-key hCq1VwXFcm4yXoV0mXn2Pp3l5vEW5m6yJ0fU3n1fGks=   # encryption on (xlaned --encryption wireguard)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			n, err := e.client().AddNode(cmd.Context(), req)
			if err != nil {
				return err
			}
			return e.print(n, func(w *tabwriter.Writer) { nodeTable(w, []model.Node{*n}) })
		},
	}
	add.Flags().StringSliceVar(&req.Underlay, "underlay", nil, "the node's address between nodes (one IPv4 and/or one IPv6; repeatable)")
	add.Flags().StringSliceVar(&req.PodCIDRs, "pod-cidr", nil, "the node's pod prefix inside the cluster CIDR (one IPv4 and/or one IPv6; repeatable)")
	add.Flags().StringVar(&req.WGPublicKey, "wg-public-key", "", "the node's WireGuard public key (base64; its xlane status shows it): required for a peer when this node runs xlaned --encryption wireguard")
	add.Flags().IntVar(&req.MTU, "mtu", 0, "the node's underlay MTU (optional): networks of the cluster may not carry bigger packets than every peer takes")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List nodes",
		Example: `  xlane node ls
  xlane node ls -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nodes, err := e.client().Nodes(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(nodes, func(w *tabwriter.Writer) { nodeTable(w, nodes) })
		},
	}
	inspect := &cobra.Command{
		Use:     "inspect NAME",
		Short:   "Show a node",
		Example: `  xlane node inspect node2`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := e.client().Node(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.print(n, func(w *tabwriter.Writer) { nodeTable(w, []model.Node{*n}) })
		},
	}
	rm := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove nodes: their routes, datapath entries and flows (removing a missing one succeeds)",
		Example: `  xlane node rm node2
  xlane node rm node2 node3`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := e.client().DeleteNode(cmd.Context(), n); err != nil {
					return err
				}
			}
			return nil
		},
	}
	var upd api.NodeUpdate
	update := &cobra.Command{
		Use:     "update NAME --wg-public-key KEY",
		Short:   "Give a peer node its new WireGuard public key (after its xlane node rotate-key), in place: its routes and flows stay",
		Example: `  xlane node update n2 --wg-public-key hCq1VwXFcm4yXoV0mXn2Pp3l5vEW5m6yJ0fU3n1fGks=`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := e.client().UpdateNode(cmd.Context(), args[0], upd)
			if err != nil {
				return err
			}
			return e.print(n, func(w *tabwriter.Writer) { nodeTable(w, []model.Node{*n}) })
		},
	}
	update.Flags().StringVar(&upd.WGPublicKey, "wg-public-key", "", "the node's new WireGuard public key (base64; its xlane status shows it)")
	update.MarkFlagRequired("wg-public-key")
	rotate := &cobra.Command{
		Use:   "rotate-key",
		Short: "Give this node a new WireGuard key pair (xlaned --encryption wireguard); then give every peer the new public key",
		Long: `Replaces this node's WireGuard key pair: the new private key goes to the
state file and the device (never printed); the new public key is printed.
Sessions with the old key end: give each peer the new public key (on every
other node: xlane node update THIS-NODE --wg-public-key NEW, or the --nodes
file; Kubernetes mode publishes it on the Node annotation, which the peers
read). Until a peer has it, the traffic to it waits in WireGuard; after
the grace it is dropped (--encryption-strict) or falls back to cleartext.`,
		Example: `  xlane node rotate-key            # prints the new public key
  xlane node rotate-key -o json    # .public_key: give it to every peer (xlane node update THIS-NODE --wg-public-key KEY there)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, err := e.client().RotateKey(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(info, func(w *tabwriter.Writer) { fmt.Fprintf(w, "public key:\t%s\n", info.PublicKey) })
		},
	}
	cmd.AddCommand(add, ls, inspect, update, rotate, rm)
	return cmd
}

func nodeTable(w *tabwriter.Writer, nodes []model.Node) {
	fmt.Fprintln(w, "NAME\tID\tSELF\tSTATE\tUNDERLAY\tPOD CIDRS\tWG PUBLIC KEY\tENCRYPTION")
	for _, n := range nodes {
		var u, p []string
		for _, a := range n.Underlay {
			u = append(u, a.String())
		}
		for _, c := range n.PodCIDRs {
			p = append(p, c.String())
		}
		state := "-" // this node, or not probed
		if l := n.Liveness; l != nil {
			state = l.State
			if l.State == model.PeerDown {
				state += " since " + l.Since.Local().Format("15:04:05")
			}
		}
		key := n.WGPublicKey
		if key == "" {
			key = "-"
		}
		enc := "-" // this node, or no encryption
		if e := n.Encryption; e != nil {
			enc = sessionText(e.State, e.Reason, e.LastHandshake, e.RxBytes, e.TxBytes)
		}
		fmt.Fprintf(w, "%s\t%d\t%v\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.ID, n.Self, state, strings.Join(u, ","), strings.Join(p, ","), key, enc)
	}
}

// encryptionStatus is status's part for xlaned --encryption: this node's
// public key and port, each peer's session.
func encryptionStatus(w *tabwriter.Writer, e *api.EncryptionInfo) {
	strict := ""
	if e.Strict {
		strict = ", strict"
	}
	if e.Node {
		strict += ", node traffic"
	}
	fmt.Fprintf(w, "encryption:\t%s (%s engine%s), device %s, UDP %d\n", e.Mode, e.Engine, strict, e.Device, e.Port)
	fmt.Fprintf(w, "public key:\t%s\n", e.PublicKey)
	if e.Error != "" {
		fmt.Fprintf(w, "encryption error:\t%s\n", e.Error)
	}
	if e.Cleartext > 0 {
		fmt.Fprintf(w, "encryption fallback:\t%d peer(s) without a working session get the pods' traffic IN CLEARTEXT (xlaned --encryption-strict drops it instead)\n", e.Cleartext)
	}
	for _, p := range e.Peers {
		fmt.Fprintf(w, "  peer %s:\t%s at %s: %s\n", p.Node, p.PublicKey, p.Endpoint,
			sessionText(p.State, p.Reason, p.LastHandshake, p.RxBytes, p.TxBytes))
		if p.Detail != "" {
			fmt.Fprintf(w, "  \t  %s\n", p.Detail)
		}
	}
}

// sessionText is a peer's WireGuard session in a line: what its traffic
// does, why it is not encrypted, the handshake's age, the bytes.
func sessionText(state, reason string, hs *time.Time, rx, tx uint64) string {
	s := state
	switch state {
	case "dropped":
		s += " (drop_unencrypted)"
	case "cleartext":
		s += " (fallback: the overlay unencrypted)"
	}
	if reason != "" {
		s += ": " + reason
	}
	age := "never"
	if hs != nil {
		age = fmt.Sprintf("%ds ago", int(time.Since(*hs).Seconds()))
	}
	return s + fmt.Sprintf(" (handshake %s, rx %s, tx %s)", age, humanBytes(rx), humanBytes(tx))
}
