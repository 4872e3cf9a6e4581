package datapath

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modPath = "github.com/xlane-dev/xlane"

// bpfImporters are the product packages besides internal/datapath that
// may import internal/bpf, and why. bench/ and test/ tools may too: they
// drive the programs and maps directly to measure or check them.
var bpfImporters = map[string]string{
	"internal/bpf": "the BPF objects themselves",
	// The firewall's compiler and installer are the datapath side of the
	// firewall: they encode rules into the firewall maps' layout
	// (bpf/lib/fw.h), which the datapath hands them (Firewall role).
	"internal/firewall": "encodes rules into the firewall maps",
	// Socket acceleration's self-test loads and runs the sockops/sk_msg
	// programs in a child process, apart from the datapath's own.
	"internal/accel": "loads the socket programs for its self-test",
}

// bpfFiles are the control plane's files that still import internal/bpf,
// by package: the event monitor and the tracer (internal/observe) decode
// the programs' events and trace records (bpf.MonEvent, bpf.Tracer). No
// other file of these packages may import it, and
// the test fails once one of these no longer does (take it off the list):
// the list only shrinks.
var bpfFiles = map[string][]string{
	"internal/observe": {"monitor.go", "trace.go"},
}

// TestOnlyDatapathImportsBPF: among the non-test packages under cmd/ and
// internal/, only the datapath implementation imports internal/bpf
// (issue 27): callers see model types and the role interfaces of seam.go,
// never map keys, values or flags.
func TestOnlyDatapathImportsBPF(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Dir,GoFiles,Imports", modPath+"/cmd/...", modPath+"/internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath, Dir  string
			GoFiles, Imports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		rel := strings.TrimPrefix(p.ImportPath, modPath+"/")
		if !slices.Contains(p.Imports, modPath+"/internal/bpf") || rel == "internal/datapath" {
			if len(bpfFiles[rel]) > 0 && rel != "internal/datapath" {
				t.Errorf("%s no longer imports internal/bpf: take it off bpfFiles", rel)
			}
			continue
		}
		if _, ok := bpfImporters[rel]; ok {
			continue
		}
		files, ok := bpfFiles[rel]
		if !ok {
			t.Errorf("%s imports internal/bpf: go through internal/datapath's role interfaces (model types), or say in bpfImporters why it must", rel)
			continue
		}
		for _, f := range p.GoFiles {
			imp := importsBPF(t, filepath.Join(p.Dir, f))
			listed := slices.Contains(files, f)
			switch {
			case imp && !listed:
				t.Errorf("%s/%s imports internal/bpf: go through internal/datapath's role interfaces (model types)", rel, f)
			case !imp && listed:
				t.Errorf("%s/%s no longer imports internal/bpf: take it off bpfFiles", rel, f)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("go list found %d packages: not the module's", seen)
	}
}

func importsBPF(t *testing.T, path string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Imports {
		if p, _ := strconv.Unquote(s.Path.Value); p == modPath+"/internal/bpf" {
			return true
		}
	}
	return false
}
