package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
)

type env struct {
	socket string
	output string
	out    io.Writer
}

func (e *env) client() *api.Client { return api.NewClient(e.socket) }

// print writes v as JSON with -o json, else calls table.
func (e *env) print(v any, table func(w *tabwriter.Writer)) error {
	switch e.output {
	case "json":
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "table", "":
		w := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
		table(w)
		return w.Flush()
	default:
		return fmt.Errorf("--output %q: want table or json", e.output)
	}
}

// Main runs the CLI and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	e := &env{out: stdout}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetErr(stderr)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(stderr, "Error:", describe(err))
		return 1
	}
	return 0
}

// newRoot builds the command tree.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "xlane",
		Short: "Manage xlane networks and endpoints",
		Long: `xlane talks to the xlane daemon (xlaned) of this node.

A network is a set of endpoints that share subnets and a gateway; its mode
picks the datapath:
  auto         the default: what measured fastest and correct here (now tc)
  tc           tcx BPF programs on each host device, bpf_redirect_peer
               between local containers, the FIB for the rest
  xdp          native XDP on each host veth, XDP_REDIRECT through a devmap
  xdp-generic  the same program as generic XDP
  kernel       plain Linux routing, no BPF
An endpoint is one interface of a container: a veth (or netkit, --device)
pair whose container side xlane moves into the container's network
namespace and configures.

Quick start:
  xlane network create blue --subnet 10.10.0.0/24 --subnet fd00:10::/64
  ip netns add c1
  xlane endpoint add blue --netns c1
  xlane endpoint ls`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	def := os.Getenv("XLANE_SOCKET")
	if def == "" {
		def = api.DefaultSocket
	}
	root.PersistentFlags().StringVar(&e.socket, "socket", def, "daemon API socket (env XLANE_SOCKET)")
	root.PersistentFlags().StringVarP(&e.output, "output", "o", "table", "output format: table or json")
	root.AddCommand(networkCmd(e), nodeCmd(e), endpointCmd(e), serviceCmd(e), ctCmd(e), statusCmd(e), calibrateCmd(e), fwCmd(e), policyCmd(e), accelCmd(e), proxyCmd(e), bpfCmd(e), monitorCmd(e), traceCmd(e), bgpCmd(e), lbPoolCmd(e), versionCmd(e))
	// Before the completion command is made: it takes its output then.
	root.SetOut(e.out)
	completionExamples(root)
	refuseStrayArgs(root)
	return root
}

// completionExamples adds cobra's completion command now (it would at
// Execute) and gives each shell's an example: where to install the script.
func completionExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	ex := map[string]string{
		"bash": `  xlane completion bash > /etc/bash_completion.d/xlane          # every new shell (Debian's bash-completion)
  source <(xlane completion bash)                                  # this shell only`,
		"zsh": `  xlane completion zsh > "${fpath[1]}/_xlane"                     # every new shell (compinit must be on)
  source <(xlane completion zsh)                                   # this shell only`,
		"fish": `  xlane completion fish > ~/.config/fish/completions/xlane.fish   # every new shell
  xlane completion fish | source                                   # this shell only`,
		"powershell": `  xlane completion powershell | Out-String | Invoke-Expression`,
	}
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = "  xlane completion bash > /etc/bash_completion.d/xlane"
		for _, sh := range c.Commands() {
			sh.Example = ex[sh.Name()]
		}
	}
}

// groupAnnotation marks a command group: it runs only to show its help.
const groupAnnotation = "xlane/group"

// refuseStrayArgs makes every command group (a command that only holds
// subcommands) refuse words that name none of them: cobra's default for a
// group below the root prints its help and exits 0, so `xlane network
// craete x` did nothing and "succeeded". cobra checks Args of runnable
// commands only, so a group runs: its help, when no word follows it.
// Commands that run say their own argument count (Args).
func refuseStrayArgs(c *cobra.Command) {
	if !c.Runnable() {
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[groupAnnotation] = "true"
	}
	for _, sub := range c.Commands() {
		refuseStrayArgs(sub)
	}
}

// describe phrases an API error for people: the message already names the
// field and the reason.
func describe(err error) string {
	var re *api.RemoteError
	if errors.As(err, &re) {
		return re.Error_.Message
	}
	return err.Error()
}

func statusCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show what the daemon can do and the datapath's counters",
		Example: `  xlane status
  xlane status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := e.client().Status(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(st, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "version:\t%s\nstate:\t%s\npin dir:\t%s\n", st.Version, st.StatePath, st.PinDir)
				if st.Uplink != "" {
					xdp := st.UplinkXDPMode
					if xdp == "" {
						xdp = "none"
					}
					fmt.Fprintf(w, "uplink:\t%s (XDP: %s)\n", st.Uplink, xdp)
				}
				fmt.Fprintf(w, "networks:\t%d\nendpoints:\t%d\n", st.Networks, st.Endpoints)
				if st.Monitor {
					fmt.Fprintln(w, "monitor:\tbuilt in (xlane monitor)")
				} else {
					fmt.Fprintln(w, "monitor:\toff (xlaned --monitor=false: hooks built out, xlane monitor refused)")
				}
				if c := st.Cluster; c != nil {
					fmt.Fprintf(w, "cluster:\tnode %s of %s, routing %s", c.NodeName, strings.Join(c.ClusterCIDRs, ","), c.Routing)
					if c.Device != "" {
						fmt.Fprintf(w, " (%s, UDP %d, encapsulation %s)", c.Device, c.VXLANPort, c.OverlayEncap)
					}
					if c.MTU != 0 {
						fmt.Fprintf(w, ", pod MTU %d", c.MTU)
					}
					fmt.Fprintln(w)
					if e := c.Encryption; e != nil {
						encryptionStatus(w, e)
					}
				}
				if m := st.Services; m != nil {
					fmt.Fprintf(w, "services:\t%d, kernel memory %s per service + %s fixed (tables %s, maps %s)\n", m.Services,
						humanBytes(m.PerServiceBytes), humanBytes(m.FixedBytes), humanBytes(m.TableBytes), humanBytes(m.MapBytes))
				}
				printHubble(w, st.Hubble)
				if m := st.NeighMirror; m != nil {
					fmt.Fprintf(w, "neighbour mirror:\t%d events, %d pending, %d resyncs", m.Events, m.Pending, m.Resyncs)
					if m.LastResync != nil {
						fmt.Fprintf(w, " (last %s: %s)", m.LastResync.Format(time.RFC3339), m.LastError)
					}
					fmt.Fprintln(w)
				}
				if c := st.Calibration; c != nil {
					switch {
					case c.Choice != nil:
						fmt.Fprintf(w, "auto:\t%s\n", c.Choice.Reason)
					case c.Running:
						fmt.Fprintln(w, "auto:\tcalibrating (xlane calibrate --show)")
					default:
						fmt.Fprintln(w, "auto:\tnot calibrated on this node yet (xlane calibrate)")
					}
					fmt.Fprintf(w, "auto rule:\t%s\n", c.Rule)
				}
				printHealth(w, st.Health)
				qemu := st.VM.QEMU
				if qemu == "" {
					qemu = "no QEMU"
				}
				fmt.Fprintf(w, "vm backends:\t%s (%s); af-xdp: %v: %s\n", strings.Join(st.VM.Backends, ", "), qemu, st.VM.AFXDP, st.VM.AFXDPReason)
				fmt.Fprintln(w, "\nMODE\tAVAILABLE\tREASON")
				for _, m := range st.Modes {
					fmt.Fprintf(w, "%s\t%v\t%s\n", m.Mode, m.Available, m.Reason)
				}
				printFeatures(w, st)
				printReasons(w, st.Counters)
			})
		},
	}
}

func printReasons(w io.Writer, rs []api.ReasonCounter) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nDIRECTION\tREASON\tPACKETS\tBYTES")
	for _, r := range rs {
		reason := r.Reason
		if r.Drop {
			reason += " (drop)"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", r.Direction, reason, r.Packets, r.Bytes)
	}
}

func joinAny[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// humanBytes is n in B, KiB, MiB or GiB, one decimal.
func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
