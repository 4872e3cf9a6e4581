package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
)

func calibrateCmd(e *env) *cobra.Command {
	show := false
	cmd := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure which datapath mode and BIG TCP setting auto takes on this node",
		Long: `Measure, on this node's kernel and CPU, what --mode auto and --big-tcp auto
mean: xlaned builds a throwaway network per mode that can run here (kernel,
tc, xdp-generic, xdp) with two endpoints in throwaway namespaces, measures
TCP between them (IPv4 and IPv6, each mode twice, interleaved), then BIG TCP
on and off on the fastest mode, stores the choice and removes everything it
made. About 12 seconds; no traffic leaves the namespaces. xlaned runs it at
its first start (--calibrate-at-start). Networks created afterwards with
auto take the new choice; existing networks keep their mode (xlane network
update NAME --mode auto re-resolves one). An explicit --mode always wins.`,
		Example: `  xlane calibrate
  xlane calibrate --show       # the stored choice and its figures, measuring nothing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var c *api.Calibration
			var err error
			if show {
				c, err = e.client().Calibration(cmd.Context())
			} else {
				c, err = e.client().Calibrate(cmd.Context())
			}
			if err != nil {
				return err
			}
			return e.print(c, func(w *tabwriter.Writer) { calibrationTable(w, c) })
		},
	}
	cmd.Flags().BoolVar(&show, "show", false, "show the stored calibration instead of measuring")
	return cmd
}

func calibrationTable(w *tabwriter.Writer, c *api.Calibration) {
	if c.Running {
		fmt.Fprintln(w, "calibration:\trunning")
	}
	if c.LastError != "" {
		fmt.Fprintf(w, "last error:\t%s\n", c.LastError)
	}
	if c.Choice == nil {
		fmt.Fprintln(w, "auto:\tnot calibrated on this node yet")
		return
	}
	ch := c.Choice
	fmt.Fprintf(w, "auto:\t%s\nbig tcp:\tipv4 %s, ipv6 %s\nreason:\t%s\nmeasured:\t%s (took %s)\n",
		ch.Mode, onOff(ch.BigTCP4), onOff(ch.BigTCP6), ch.Reason, ch.At.Format("2006-01-02 15:04:05 MST"), ch.Took)
	fmt.Fprintln(w, "\nMODE\tFAMILY\tBIG TCP\tGBIT/S")
	for _, s := range ch.Samples {
		fmt.Fprintf(w, "%s\t%s\t%s\t%.2f\n", s.Mode, s.Family, onOff(s.BigTCP), s.Gbps)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
