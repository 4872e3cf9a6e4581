package cli

import (
	"bytes"
	"strings"
	"testing"

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
