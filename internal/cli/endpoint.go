package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
)

func endpointCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "endpoint",
		Aliases: []string{"ep"},
		Short:   "Add, list, inspect and remove endpoints",
	}
	var req api.EndpointAdd
	add := &cobra.Command{
		Use:   "add NETWORK (--netns NAME|PATH | --veth-only | --vm) [flags]",
		Short: "Attach a network namespace or a QEMU guest to a network",
		Long: `Create a veth pair, move one end into the namespace as --ifname, give it
an address from each subnet of NETWORK (or the --ip given), and program the
datapath. It returns once the kernel reports the host side up (at most 5 s;
the printed state says "ready", or what is wrong). With --veth-only the
container side stays in the node's namespace under the printed peer name,
for runtimes that move it themselves.

With --vm the endpoint is a QEMU guest's port: xlane creates a persistent
tap (virtio-net headers; multi-queue with --queues N > 1) with the same
datapath as a container's veth (anti-spoofing on the guest's --mac and its
addresses, firewall, conntrack/NAT, services, counters) and prints the QEMU
options that attach a guest to it. The guest gets its addresses by DHCP(v6)
and router advertisements from xlaned (docs/vm.md). VM endpoints need mode
tc or kernel.

With --vm --backend af-xdp the guest's port is backed by AF_XDP sockets
instead: xlane creates a veth pair whose host end gets the same datapath
and whose other end (the port, in the node's namespace) gets xlane's XDP
program and a pinned socket map; QEMU (>= 10.1 with af-xdp, see xlane
status) binds its sockets to the port and puts them into the map
(inhibit=on,map-path=). Needs mode tc.

On any failure nothing is left behind: no veth or tap, no address lease.`,
		Example: `  xlane endpoint add blue --netns c1
  xlane endpoint add blue --netns /proc/1234/ns/net --ifname eth1 --ip 10.10.0.50
  xlane endpoint add blue --veth-only --id my-container
  xlane endpoint add blue --vm --id vm1 --mac 52:54:00:00:00:01 --queues 2
  xlane endpoint add blue --vm --backend af-xdp --id vm2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Network = args[0]
			ep, err := e.client().AddEndpoint(cmd.Context(), req)
			if err != nil {
				return err
			}
			return e.print(ep, func(w *tabwriter.Writer) {
				endpointTable(w, []api.EndpointInfo{*ep})
				if len(ep.QEMUArgs) > 0 {
					w.Flush()
					fmt.Fprintf(e.out, "qemu: %s\n", strings.Join(ep.QEMUArgs, " "))
				}
			})
		},
	}
	add.Flags().StringVar(&req.Netns, "netns", "", "network namespace: a name under /var/run/netns or a path")
	add.Flags().StringVar(&req.IfName, "ifname", "", "interface name in the namespace (default eth0)")
	add.Flags().StringSliceVar(&req.IPs, "ip", nil, "address to use instead of the next free one (repeatable)")
	add.Flags().StringVar(&req.ID, "id", "", "endpoint ID (default: generated)")
	add.Flags().BoolVar(&req.VethOnly, "veth-only", false, "create the veth pair only; the runtime moves the peer")
	add.Flags().BoolVar(&req.VM, "vm", false, "a QEMU guest's port: a tap QEMU opens by name (prints the QEMU options)")
	add.Flags().StringVar(&req.MAC, "mac", "", "the guest's (or container side's) MAC address (default: random)")
	add.Flags().IntVar(&req.Queues, "queues", 0, "--vm: queue pairs of the tap and the guest's virtio-net (default 1)")
	add.Flags().StringToStringVar(&req.Labels, "label", nil, "KEY=VALUE: a label xlane policy selects the endpoint by (repeatable)")
	add.Flags().StringVar(&req.Backend, "backend", "", "--vm: tap (default) or af-xdp (QEMU's AF_XDP backend; xlane status says whether the node's QEMU has it)")

	var network string
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List endpoints with their counters",
		Example: `  xlane endpoint ls
  xlane endpoint ls --network blue -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			eps, err := e.client().Endpoints(cmd.Context(), network)
			if err != nil {
				return err
			}
			return e.print(eps, func(w *tabwriter.Writer) { endpointTable(w, eps) })
		},
	}
	ls.Flags().StringVar(&network, "network", "", "only endpoints of this network")
	inspect := &cobra.Command{
		Use:   "inspect ID",
		Short: "Show an endpoint with per-reason datapath counters",
		Example: `  xlane endpoint inspect web1
  xlane endpoint inspect web1 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := e.client().Endpoint(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.print(ep, func(w *tabwriter.Writer) {
				if len(ep.Ports) > 0 {
					fmt.Fprintf(w, "published:\t%s\n", joinAny(ep.Ports))
				}
				fmt.Fprintf(w, "id:\t%s\nnetwork:\t%s (mode %s)\nstate:\t%s\nnetns:\t%s\nifname:\t%s (mac %s)\nhost ifname:\t%s (mac %s)\npeer ifname:\t%s\nips:\t%s\nsent:\t%d packets, %d bytes\nreceived:\t%d packets, %d bytes\n",
					ep.ID, ep.Network, ep.Mode, ep.State, ep.Netns, ep.IfName, ep.MAC, ep.HostIf, ep.HostMAC, ep.PeerIf,
					joinAny(ep.IPs), ep.Sent.Packets, ep.Sent.Bytes, ep.Received.Packets, ep.Received.Bytes)
				if ep.Error != "" {
					fmt.Fprintf(w, "error:\t%s\n", ep.Error)
				}
				if len(ep.Labels) > 0 {
					var parts []string
					for _, k := range slices.Sorted(maps.Keys(ep.Labels)) {
						parts = append(parts, k+"="+ep.Labels[k])
					}
					fmt.Fprintf(w, "labels:\t%s\n", strings.Join(parts, " "))
				}
				if len(ep.Datapath) > 0 {
					fmt.Fprintf(w, "datapath:\t%s\n", strings.Join(ep.Datapath, ", "))
				}
				if len(ep.Offloads) > 0 {
					keys := slices.Sorted(maps.Keys(ep.Offloads))
					var parts []string
					for _, k := range keys {
						parts = append(parts, fmt.Sprintf("%s=%v", k, ep.Offloads[k]))
					}
					fmt.Fprintf(w, "container offloads:\t%s\n", strings.Join(parts, " "))
				}
				for _, note := range ep.Notes {
					fmt.Fprintf(w, "note:\t%s\n", note)
				}
				if ep.VM {
					kind := "tap"
					if ep.AFXDP() {
						kind = "af-xdp port " + ep.PeerIf + " (socket map " + ep.XSKMap + ")"
					}
					fmt.Fprintf(w, "vm:\t%s with %d queue(s); the guest's MAC is %s\n", kind, ep.Queues, ep.MAC)
				}
				if len(ep.QEMUArgs) > 0 {
					fmt.Fprintf(w, "qemu:\t%s\n", strings.Join(ep.QEMUArgs, " "))
				}
				printReasons(w, ep.Reasons)
			})
		},
	}
	rm := &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove endpoints (removing a missing one succeeds)",
		Example: `  xlane endpoint rm web1
  xlane endpoint rm web1 web2 ctr42`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, id := range args {
				if err := e.client().DeleteEndpoint(cmd.Context(), id); err != nil {
					return err
				}
			}
			return nil
		},
	}
	var ports []string
	publish := &cobra.Command{
		Use:   "publish ID --port [HOSTIP:]NODEPORT:PORT[/tcp|udp]...",
		Short: "Publish endpoint ports on the node's address (DNAT)",
		Long: `Make PORT of the endpoint reachable as NODEPORT on the node's uplink
address, from outside and from other containers, like docker run -p, and on
127.0.0.1 for the node's own processes. With HOSTIP (IPv6 in brackets),
on that address alone (Kubernetes' hostPort with hostIP): the same NODEPORT
may then be published on other addresses. Needs a BPF mode (tc, xdp,
xdp-generic) and xlaned --uplink.`,
		Example: `  xlane endpoint publish web --port 8080:80/tcp --port 5353:53/udp
  xlane endpoint publish web --port 127.0.0.1:8081:80 --port [fd00::1]:8081:80`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := e.client().PublishPorts(cmd.Context(), args[0], ports, false)
			if err != nil {
				return err
			}
			return e.print(ep, func(w *tabwriter.Writer) { endpointTable(w, []api.EndpointInfo{*ep}) })
		},
	}
	publish.Flags().StringSliceVar(&ports, "port", nil, "[HOSTIP:]NODEPORT:PORT[/tcp|udp] (repeatable)")
	unpublish := &cobra.Command{
		Use:   "unpublish ID --port [HOSTIP:]NODEPORT[:PORT][/tcp|udp]...",
		Short: "Withdraw published ports (withdrawing a missing one succeeds)",
		Example: `  xlane endpoint unpublish web1 --port 8080
  xlane endpoint unpublish web1 --port 8080:80/tcp --port 5353:53/udp`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := e.client().PublishPorts(cmd.Context(), args[0], ports, true)
			if err != nil {
				return err
			}
			return e.print(ep, func(w *tabwriter.Writer) { endpointTable(w, []api.EndpointInfo{*ep}) })
		},
	}
	unpublish.Flags().StringSliceVar(&ports, "port", nil, "[HOSTIP:]NODEPORT[:PORT][/tcp|udp] (repeatable)")
	cmd.AddCommand(add, ls, inspect, publish, unpublish, rm)
	return cmd
}

func endpointTable(w *tabwriter.Writer, eps []api.EndpointInfo) {
	fmt.Fprintln(w, "ID\tNETWORK\tMODE\tIPS\tHOST IF\tSTATE\tSENT PKTS\tSENT BYTES\tRECV PKTS\tRECV BYTES\tDROPS")
	for _, ep := range eps {
		var drops uint64
		for _, r := range ep.Reasons {
			if r.Drop {
				drops += r.Packets
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", ep.ID, ep.Network, ep.Mode, joinAny(ep.IPs),
			ep.HostIf, ep.State, ep.Sent.Packets, ep.Sent.Bytes, ep.Received.Packets, ep.Received.Bytes, drops)
	}
}
