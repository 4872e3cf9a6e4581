package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func ctCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ct",
		Aliases: []string{"conntrack"},
		Short:   "Inspect and flush the datapath's connection tracking",
		Long: `The BPF datapath tracks every flow it forwards, one entry per direction
(original and reply), with its state, counters, NAT translation and how long
it may stay idle. Expired entries are collected by the daemon.`,
	}
	var limit int
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List tracked flows",
		Example: `  xlane ct ls
  xlane ct ls --limit 0 -o json   # every flow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs, err := e.client().Flows(cmd.Context(), limit)
			if err != nil {
				return err
			}
			return e.print(fs, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "PROTO\tSRC\tDST\tDIR\tSTATE\tNAT\tPACKETS\tBYTES\tEXPIRES IN")
				for _, f := range fs {
					nat := f.NAT
					if nat != "" {
						nat += " to " + f.NATTo
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%ds\n", f.Proto, f.Src, f.Dst, f.Direction, f.State, nat, f.Packets, f.Bytes, f.ExpiresIn)
				}
			})
		},
	}
	ls.Flags().IntVar(&limit, "limit", 1000, "at most this many entries (0: all)")
	flush := &cobra.Command{
		Use:     "flush",
		Short:   "Delete every tracked flow (translated connections break)",
		Example: `  xlane ct flush`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := e.client().FlushFlows(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(map[string]int{"deleted": n}, func(w *tabwriter.Writer) { fmt.Fprintf(w, "deleted %d entries\n", n) })
		},
	}
	stats := &cobra.Command{
		Use:     "stats",
		Short:   "Show table size, use, memory per entry and GC activity",
		Example: `  xlane ct stats`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := e.client().CTStats(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(s, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "entries:\t%d of %d\nexpired, not yet collected:\t%d\nbytes per entry:\t%d\npackets untracked (table full):\t%d\ngc runs:\t%d (%d entries collected)\n",
					s.Entries, s.MaxEntries, s.Expired, s.BytesPerEntry, s.TableFull, s.GCRuns, s.GCDeleted)
			})
		},
	}
	cmd.AddCommand(ls, flush, stats)
	return cmd
}
