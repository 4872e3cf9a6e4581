package daemon

import "github.com/xlane-dev/xlane/internal/core"

// Core is the daemon as its feature packages see it: cmd/xlaned hands it
// to the features it wires itself (internal/bgp).
func (d *Daemon) Core() core.Core { return coreView{d} }
