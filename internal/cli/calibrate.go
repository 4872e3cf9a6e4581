package cli

import (
	"fmt"
	"strings"
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
tc, xdp-generic, xdp) with two endpoints in throwaway namespaces and measures
TCP between them in 3 interleaved rounds (IPv4 and IPv6, every mode once a
round, the order reversed every other round).

The rule: the default mode, tc, is left only on a margin that repeats. A
round's score is the geometric mean of its IPv4 and IPv6 Gbit/s; a mode is
ranked before tc only when its slowest round beats tc's fastest round by 5 %
(the two spreads do not overlap). BIG TCP is then measured off and on in
alternation, 3 rounds, on the mode a network created with no flags gets, and
turned on per family by the same rule (slowest on >= 1.05 x fastest off).

auto takes the first mode of that ranking that gives the network every
feature it asks for: kernel mode has no masquerade, published ports,
services, ICC off, isolation or VLANs, XDP modes no netkit or VM endpoints.
So a network created with no flags (masquerade on) never gets kernel mode.
xlaned stores the choice and removes everything it made; about 14 seconds,
no traffic leaves the namespaces, and the throwaway networks and endpoints
appear in no listing. xlaned runs it at its first start
(--calibrate-at-start). Networks created afterwards with auto take the new
choice; existing networks keep their mode and features (xlane network update
NAME --mode auto re-resolves one, under the same guard). An explicit --mode
always wins.`,
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
		fmt.Fprintf(w, "auto:\tnot calibrated on this node yet\nrule:\t%s\n", c.Rule)
		return
	}
	ch := c.Choice
	fmt.Fprintf(w, "auto:\t%s\nranking:\t%s (default %s)\nbig tcp:\tipv4 %s, ipv6 %s (measured on %s)\nreason:\t%s\nrule:\t%s\nmeasured:\t%s (took %s)\n",
		ch.Mode, strings.Join(ch.Ranked, ", "), ch.Default, onOff(ch.BigTCP4), onOff(ch.BigTCP6), ch.BigTCPMode,
		ch.Reason, ch.Rule, ch.At.Format("2006-01-02 15:04:05 MST"), ch.Took)
	fmt.Fprintln(w, "\nMODE\tROUNDS (GBIT/S)\tMIN\tMAX\tBEATS DEFAULT")
	for _, s := range ch.Scores {
		var rs []string
		for _, r := range s.Rounds {
			rs = append(rs, fmt.Sprintf("%.2f", r))
		}
		fmt.Fprintf(w, "%s\t%s\t%.2f\t%.2f\t%v\n", s.Mode, strings.Join(rs, " "), s.Min, s.Max, s.Beats)
	}
	fmt.Fprintln(w, "\nPROBE\tROUND\tMODE\tFAMILY\tBIG TCP\tGBIT/S")
	for _, s := range ch.Samples {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%.2f\n", s.Probe, s.Round, s.Mode, s.Family, onOff(s.BigTCP), s.Gbps)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
