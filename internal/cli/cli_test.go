package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/model"
)

// TestHelpNamesEveryMode: `xlane --help` explains the network modes, so it
// must name every mode a network can ask for (model.Modes), one per line.
func TestHelpNamesEveryMode(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("xlane --help: exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(out.String(), "\n")
	for _, m := range model.Modes {
		found := false
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == string(m) {
				found = true
			}
		}
		if !found {
			t.Errorf("xlane --help does not explain mode %q:\n%s", m, out.String())
		}
	}
}

// TestStrayArgsRefused: every command either says how many arguments it
// takes, or (a group) refuses a word that names none of its subcommands,
// instead of printing its help and exiting 0 (`xlane network craete x`).
func TestStrayArgsRefused(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Args == nil {
			t.Errorf("%q runs with any arguments: give it Args (cobra.NoArgs, cobra.ExactArgs(n), ...)", c.CommandPath())
		}
		if c.HasSubCommands() {
			path := strings.Fields(c.CommandPath())[1:]
			var out, errOut bytes.Buffer
			code := Main(append(path, "craete"), &out, &errOut)
			if code == 0 || !strings.Contains(errOut.String(), `unknown command "craete"`) {
				t.Errorf("xlane %s craete: exit %d, stderr %q; want exit 1 and unknown command", strings.Join(path, " "), code, errOut.String())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&env{out: io.Discard}))
}
