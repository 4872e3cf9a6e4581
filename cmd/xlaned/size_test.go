package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoTextTemplate fails when xlaned, built as the Makefile builds it
// (-tags=grpcnotrace), links text/template: a call of a method by a name
// known only at run time, as templates make, keeps every exported method
// of every type in the binary. gRPC's golang.org/x/net/trace brought it
// in (html/template) and made xlaned 93.8 MB instead of 62.4 MB.
func TestNoTextTemplate(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags=grpcnotrace", "-deps", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, p := range strings.Fields(imports) {
			// GoBGP's configuration (viper → spf13/cast) imports
			// html/template for a type; measured, xlaned with it is
			// 69.0 MB, 5.4 MB over main's 63.6 MB, all of GoBGP
			// (docs/bgp.md): no importer but that one.
			if (p == "text/template" || p == "html/template") && pkg != "html/template" && pkg != "github.com/spf13/cast" {
				t.Errorf("xlaned imports %s through %s (go list -deps -tags=grpcnotrace)", p, pkg)
			}
		}
	}
}
