// Command xlane-cni is xlane's CNI plugin: it attaches containers to xlane
// networks through the local xlaned (internal/cni, docs/kubernetes.md).
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/xlane-dev/xlane/internal/cni"
)

// version_ is set at build time (-ldflags "-X main.version_=...").
var version_ = "dev"

func main() {
	skel.PluginMainFuncs(cni.Funcs(), version.All, "xlane-cni "+version_+": xlane's CNI plugin (calls xlaned)")
}
