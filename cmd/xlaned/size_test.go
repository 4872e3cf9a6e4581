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
	out, err := exec.Command("go", "list", "-tags=grpcnotrace", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "text/template" {
			t.Fatal("xlaned imports text/template (go list -deps -tags=grpcnotrace; `go mod why` says through what)")
		}
	}
}
