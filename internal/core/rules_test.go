package core

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/xlane-dev/xlane/"

// foundation are the packages the core may build on: models, the store,
// the datapath and the libraries under them. Everything else in the module
// is a feature (internal/vm, internal/calibration, ...), the daemon that
// wires the remaining ones (internal/daemon), or an edge (server, CLI,
// Docker, Kubernetes, CNI), none of which the core may import.
var foundation = map[string]bool{
	"internal/accel":          true, // acceleration settings and counters (API types)
	"internal/api":            true,
	"internal/bpf":            true,
	"internal/calibrate":      true, // the calibration's choice (a model)
	"internal/core":           true,
	"internal/datapath":       true,
	"internal/features":       true, // kernel feature probes
	"internal/firewall/rules": true, // the rule model (API types)
	"internal/ipam":           true,
	"internal/ktime":          true, // the datapath's clock (a library)
	"internal/maglev":         true,
	"internal/model":          true,
	"internal/netconf":        true,
	"internal/store":          true,
	"internal/trace":          true,
	"internal/version":        true,
}

// features are the feature packages by name, so that the message says what
// went wrong; the rule above catches one that is not listed here too.
var featurePackages = []string{
	"internal/daemon", "internal/vm", "internal/calibration", "internal/observe", "internal/cluster", "internal/services", "internal/firewall/control", "internal/accelproxy", "internal/hubble",
	"internal/bgp", "internal/lbipam", "internal/fqdn",
}

// TestCoreImportsNoFeature fails when internal/core depends, directly or
// through another package, on any package of the module outside the
// foundation: a core that imported a feature would grow back into the one
// package every feature lives in (issue 27).
func TestCoreImportsNoFeature(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"internal/core").Output()
	if err != nil {
		t.Fatalf("go list -deps internal/core: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps internal/core listed nothing")
	}
	for _, p := range deps {
		rel, ok := strings.CutPrefix(p, module)
		if !ok || foundation[rel] {
			continue
		}
		what := "a package outside the core's foundation (add it to foundation only if it is a model or a library, not a feature)"
		for _, f := range featurePackages {
			if rel == f {
				what = "a feature package"
			}
		}
		t.Errorf("internal/core imports %s: %s", rel, what)
	}
}

// TestFeaturesImportNoDaemon fails when a feature package imports
// internal/daemon: features reach the core through core.Core only, and the
// daemon imports them to wire them.
func TestFeaturesImportNoDaemon(t *testing.T) {
	for _, f := range featurePackages[1:] {
		out, err := exec.Command("go", "list", "-e", "-deps", "-f", "{{.ImportPath}}", module+f).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", f, err)
		}
		for _, p := range strings.Fields(string(out)) {
			if p == module+"internal/daemon" {
				t.Errorf("%s imports internal/daemon: it must reach the core through core.Core", f)
			}
		}
	}
}
