package datapath

import (
	"os"
	"path/filepath"
	"sort"

	"github.com/xlane-dev/xlane/internal/model"
)

// ExpectedHooks lists the hooks (as Hooks names them: kind/suffix) a host
// device of an endpoint in mode carries; netkit devices carry their two
// netkit programs whatever the mode.
func (d *BPF) ExpectedHooks(mode model.Mode, netkit bool) []string {
	hs := hooksFor(mode)
	if netkit {
		hs = []hook{hookNetkitPeer, hookNetkitPrimary}
	}
	var out []string
	for _, h := range hs {
		kind := h.kind
		if kind == "tcx" && d.legacyTC {
			kind = "tc"
		}
		out = append(out, kind+"/"+h.suffix)
	}
	return out
}

// UplinkHooks lists the uplink's hooks this datapath attaches (the tc
// program; the XDP fast path where the XDP programs load) and those whose
// pins are there.
func (d *BPF) UplinkHooks(ifname string) (expected, present []string) {
	if ifname == "" {
		return nil, nil
	}
	hooks := []struct{ name, suffix string }{{"tcx/" + uplinkTCSuffix, uplinkTCSuffix}}
	if d.XDPErr() == nil {
		hooks = append(hooks, struct{ name, suffix string }{"xdp/" + uplinkSuffix, uplinkSuffix})
	}
	for _, h := range hooks {
		expected = append(expected, h.name)
		if _, err := os.Stat(d.linkPin(ifname, h.suffix)); err == nil {
			present = append(present, h.name)
		}
	}
	return expected, present
}

// MissingPins counts the maps this datapath pins and lists those whose
// pin under the pin directory is gone (someone removed it: a restarted
// daemon would start them empty).
func (d *BPF) MissingPins() (pinned int, missing []string) {
	for name, m := range d.objs.Maps() {
		if !m.IsPinned() {
			continue
		}
		pinned++
		if _, err := os.Stat(filepath.Join(d.pinDir, "maps", name)); err != nil {
			missing = append(missing, filepath.Join(d.pinDir, "maps", name))
		}
	}
	sort.Strings(missing)
	return pinned, missing
}
