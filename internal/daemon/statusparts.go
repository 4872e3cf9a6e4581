package daemon

import (
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
)

// AddStatus adds a feature's part to Status: a feature that cmd/xlaned
// wires (internal/hubble) fills its own field of the status with f.
func (d *Daemon) AddStatus(f func(*api.Status)) {
	for {
		old := d.statusParts.Load()
		var parts []func(*api.Status)
		if old != nil {
			parts = append(parts, *old...)
		}
		parts = append(parts, f)
		if d.statusParts.CompareAndSwap(old, &parts) {
			return
		}
	}
}

func (d *Daemon) addStatusParts(st *api.Status) {
	if parts := d.statusParts.Load(); parts != nil {
		for _, f := range *parts {
			f(st)
		}
	}
}

// Core is the daemon as a feature wired by cmd/xlaned sees it.
func (d *Daemon) Core() core.Core { return coreView{d} }
