package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/version"
)

// versionOut is what `xlane version -o json` prints.
type versionOut struct {
	Client version.Info `json:"client"`
	Daemon string       `json:"daemon,omitempty"` // xlaned's version, when it answers
	Error  string       `json:"daemon_error,omitempty"`
}

func versionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the CLI's version, commit and build date, and the daemon's version",
		Long: `Show the version of this xlane binary (git describe, the commit and the
build date, stamped by make build; a plain go build shows the commit from
the Go toolchain's VCS information) and, when xlaned answers on --socket,
the daemon's version. A daemon that does not answer is reported, not an
error.`,
		Example: `  xlane version
  xlane version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := versionOut{Client: version.Get()}
			if st, err := e.client().Status(cmd.Context()); err != nil {
				out.Error = describe(err)
			} else {
				out.Daemon = st.Version
			}
			return e.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "xlane:\t%s\n", out.Client)
				if out.Daemon != "" {
					fmt.Fprintf(w, "xlaned:\t%s\n", out.Daemon)
				} else {
					fmt.Fprintf(w, "xlaned:\tnot reachable (%s)\n", out.Error)
				}
			})
		},
	}
}
