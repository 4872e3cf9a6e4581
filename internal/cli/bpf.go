package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func bpfCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bpf",
		Short: "Read the datapath's BPF maps",
		Long: `The BPF datapath keeps its state in maps pinned under xlaned's --pin-dir:
conntrack and NAT, endpoints, services and their Maglev tables, the
neighbour mirror, the firewall's tables, counters. These commands read them
through xlaned, decoded (addresses, ports, protocols, flags, reasons).`,
	}
	maps := &cobra.Command{
		Use:     "maps",
		Short:   "List the maps `xlane bpf dump` reads",
		Example: `  xlane bpf maps`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := e.client().BPFMaps(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(ms, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tSHOWS")
				for _, m := range ms {
					help := m.Help
					if help == "" {
						help = "(raw: keys and values in hex)"
					}
					fmt.Fprintf(w, "%s\t%s\n", m.Name, help)
				}
			})
		},
	}
	var limit int
	dump := &cobra.Command{
		Use:   "dump MAP",
		Short: "Show one map's entries in readable form",
		Example: `  xlane bpf dump endpoints
  xlane bpf dump ct --limit 0 -o json   # every entry`,
		Long: `Show the entries of one of the datapath's maps, decoded. MAP is one of
` + "`xlane bpf maps`" + `: ct (conntrack), nat (conntrack entries that translate),
endpoints, metrics, neigh, devmap, config, publish, services, backends,
maglev, fw-state, fw-gens, fw-rules, fw-counters, fw-exact, fw-addr,
fw-scalar, fw-pool, fw-ddos, fw-block, fw-rate; any other loaded map by its
BPF name (keys and values in hex). The firewall's classifier maps show the
live generation.

Examples:
  xlane bpf dump ct --limit 20
  xlane bpf dump endpoints -o json
  xlane bpf dump fw-rules`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("want one MAP (see xlane bpf maps)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			md, err := e.client().BPFDump(cmd.Context(), args[0], limit)
			if err != nil {
				return err
			}
			return e.print(md, func(w *tabwriter.Writer) {
				head := make([]string, len(md.Columns))
				for i, c := range md.Columns {
					head[i] = strings.ToUpper(c)
				}
				fmt.Fprintln(w, strings.Join(head, "\t"))
				for _, ent := range md.Entries {
					vals := make([]string, len(md.Columns))
					for i, c := range md.Columns {
						vals[i] = fmt.Sprint(ent[c])
						if vals[i] == "" {
							vals[i] = "-"
						}
					}
					fmt.Fprintln(w, strings.Join(vals, "\t"))
				}
				more := ""
				if md.Truncated {
					more = fmt.Sprintf(" (--limit %d reached)", limit)
				}
				fmt.Fprintf(w, "%d entries of %s (%s, max %d)%s\n", md.Count, md.Map, md.Type, md.MaxEntries, more)
			})
		},
	}
	dump.Flags().IntVar(&limit, "limit", 1000, "at most this many entries (0: all)")
	cmd.AddCommand(maps, dump)
	return cmd
}
