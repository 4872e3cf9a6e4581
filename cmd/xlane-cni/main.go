// Command xlane-cni is xlane's CNI plugin: it attaches containers to xlane
// networks through the local xlaned (internal/cni, docs/kubernetes.md).
package main

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/xlane-dev/xlane/internal/cni"
	"github.com/xlane-dev/xlane/internal/version"
)

func main() {
	// The CNI VERSION command answers the spec versions it speaks; the
	// build's own version is --version's, and the about text's (the
	// plugin run with no CNI_COMMAND).
	about := "xlane-cni " + version.Get().String() + ": xlane's CNI plugin (calls xlaned)"
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") && os.Getenv("CNI_COMMAND") == "" {
		fmt.Println(about)
		return
	}
	skel.PluginMainFuncs(cni.Funcs(), cniversion.All, about)
}
