package daemon

import (
	"fmt"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/model"
)

// What `auto` may choose for a network: only a mode that gives it every
// feature it asks for. Speed decides among those only: the calibration
// ranks the modes (calibrate.Choice.Ranked: the modes that beat the
// default by its rule, then the default, AutoMode), and auto takes the
// first of the ranking that runs here and lacks nothing the network asks
// for. AutoMode lacks nothing, so auto never costs a network a feature.
// A network keeps the mode it got: a later calibration changes what new
// networks get, and `network update --mode auto` re-resolves under the
// same guard, with the network's own features and endpoints as its needs.

// need is a feature a network asks for that some modes lack.
type need string

const (
	needMasquerade need = "masquerade"
	// needPorts: endpoints of any network but an internal one may publish
	// ports and reach service VIPs at any time (endpoint publish, docker
	// run -p): both are the BPF datapath's.
	needPorts     need = "published ports and services"
	needICCOff    need = "ICC off"
	needIsolation need = "isolation"
	needVLAN      need = "VLAN tagging"
	// needKube: every network of a node in Kubernetes mode (xlaned
	// --kubernetes, Config.AutoBPFOnly), whose pods use Services and
	// NetworkPolicies.
	needKube   need = "Kubernetes Services and NetworkPolicies"
	needNetkit need = "netkit devices"
	needVM     need = "VM endpoints"
	needAFXDP  need = "AF_XDP VM ports"
)

// modeGives says whether mode m can give a network feature n: kernel mode
// has no BPF (no NAT, no endpoint flags, no VLAN tags, no services), XDP
// modes no netkit hook and no redirect into a tap, and an AF_XDP port is
// fed by tc mode's programs only.
func modeGives(m model.Mode, n need) bool {
	switch n {
	case needNetkit, needVM:
		return !m.XDP()
	case needAFXDP:
		return m == model.ModeTC
	default:
		return m.BPF()
	}
}

// modeLacks lists the needs mode m cannot give.
func modeLacks(m model.Mode, needs []need) []string {
	var out []string
	for _, n := range needs {
		if !modeGives(m, n) {
			out = append(out, string(n))
		}
	}
	return out
}

// createNeeds is what a network create request asks for: what it turns
// on, and what is on unless turned off (masquerade; published ports and
// services unless internal).
func (d *Daemon) createNeeds(req api.NetworkCreate) []need {
	var out []need
	if req.Masquerade == nil || *req.Masquerade {
		out = append(out, needMasquerade)
	}
	if !req.Internal {
		out = append(out, needPorts)
	}
	if req.ICC != nil && !*req.ICC {
		out = append(out, needICCOff)
	}
	if req.Isolated {
		out = append(out, needIsolation)
	}
	if req.VLAN != 0 {
		out = append(out, needVLAN)
	}
	if d.cfg.AutoBPFOnly {
		out = append(out, needKube)
	}
	if dev, err := model.ParseDeviceType(req.Device); err == nil && dev.Netkit() {
		out = append(out, needNetkit)
	}
	return out
}

// networkNeeds is what an existing network and its endpoints have: a mode
// switch to auto must keep all of it.
func (d *Daemon) networkNeeds(n *model.Network, eps []model.Endpoint) []need {
	var out []need
	add := func(on bool, x need) {
		if on {
			out = append(out, x)
		}
	}
	add(n.Masquerade, needMasquerade)
	ports := !n.Internal
	vm, afxdp := false, false
	for _, e := range eps {
		ports = ports || len(e.Ports) > 0
		vm = vm || e.VM
		afxdp = afxdp || e.AFXDP()
	}
	add(ports, needPorts)
	add(n.ICCOff, needICCOff)
	add(n.Isolated, needIsolation)
	add(n.VLAN != 0, needVLAN)
	add(d.cfg.AutoBPFOnly, needKube)
	add(n.Devices().Netkit(), needNetkit)
	add(vm, needVM)
	add(afxdp, needAFXDP)
	return out
}

// autoFrom picks auto's mode from calibration c (nil: none yet) for a
// network that asks for needs: the first mode of c's ranking that runs
// here and lacks none of them, and why.
func (d *Daemon) autoFrom(c *calibrate.Choice, needs []need) (model.Mode, string) {
	if c == nil {
		return AutoMode, autoReason + "; not calibrated on this node yet (xlane calibrate)"
	}
	at := " (calibrated " + c.At.Format(time.RFC3339) + ")"
	ranked := c.Ranked
	if len(ranked) == 0 { // a choice without a ranking: its mode, then the default
		ranked = []string{c.Mode, string(AutoMode)}
	}
	var passed []string
	for _, s := range ranked {
		m := model.Mode(s)
		if err := d.modeMissing(m); err != nil {
			passed = append(passed, fmt.Sprintf("%s cannot run here (%v)", m, err))
			continue
		}
		if lack := modeLacks(m, needs); len(lack) > 0 {
			passed = append(passed, fmt.Sprintf("%s has no %s", m, strings.Join(lack, ", ")))
			continue
		}
		if len(passed) == 0 {
			return m, c.Reason + at
		}
		return m, fmt.Sprintf("%s: the first mode of the calibration's ranking (%s) that gives this network every feature it asks for: %s; measured: %s%s",
			m, strings.Join(ranked, ", "), strings.Join(passed, "; "), c.Reason, at)
	}
	return AutoMode, fmt.Sprintf("%s: the default, as no mode of the calibration's ranking fits (%s)%s", AutoMode, strings.Join(passed, "; "), at)
}
