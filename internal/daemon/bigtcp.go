package daemon

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
)

// BIG TCP (GSO/GRO aggregates above 64 KiB) on a network's veths: on where
// asked and the kernel has it, off where asked, and for auto where this
// node's calibration measured it faster by its rule (calibrate.Rule: every
// "on" round beats every "off" round by calibrate.Margin) on the network's
// mode (Cilium users have reported regressions with it: a constant would
// be a guess), unless the network's traffic to other nodes cannot carry
// it (cluster.BigTCPOff, per family: the overlay, an uplink with 64 KiB
// GSO of the family). A network keeps what it got: a later calibration changes
// new networks only.

// resolveBigTCP fills in n.BigTCP* from what the network asked for.
func (d *Daemon) resolveBigTCP(n *model.Network, req string) error {
	switch req {
	case "", "auto":
		n.BigTCP = "auto"
	case "on", "off":
		n.BigTCP = req
	default:
		return model.Fieldf("big_tcp", "%q: want auto, on or off", req)
	}
	_, _, has4 := n.Subnet4()
	_, _, has6 := n.Subnet6()
	if n.BigTCP == "off" {
		n.BigTCPReason = "off: asked for"
		return nil
	}
	veth := n.DeviceType == "" || n.DeviceType == model.DeviceVeth
	if n.BigTCP == "on" {
		if !veth {
			return model.Fieldf("big_tcp", "on: xlane sets BIG TCP on veth endpoints only, not %s", n.DeviceType)
		}
		// Per family where the kernel has it (IPv4 BIG TCP came in 6.3,
		// IPv6's in 5.19: on 6.1 a dual-stack network gets IPv6 only);
		// the reason names what stays off and why. Refused only when
		// nothing of it can be on.
		n.BigTCP4 = has4 && d.feat.Has(features.BigTCPv4)
		n.BigTCP6 = has6 && d.feat.Has(features.BigTCPv6)
		n.BigTCPReason = "on: asked for"
		var off []string
		for _, f := range []struct {
			has       bool
			fam, feat string
		}{{has4, "ipv4", features.BigTCPv4}, {has6, "ipv6", features.BigTCPv6}} {
			if f.has && !d.feat.Has(f.feat) {
				off = append(off, fmt.Sprintf("%s off: %v", f.fam, d.feat.Missing(f.feat)))
			}
		}
		if len(off) > 0 && !n.BigTCP4 && !n.BigTCP6 {
			return model.Fieldf("big_tcp", "on: %s", strings.Join(off, "; "))
		}
		for _, o := range off {
			n.BigTCPReason += "; " + o
		}
		return nil
	}
	c := d.f.Calibration.Choice()
	// The calibration measured one node; the path between nodes may not
	// carry BIG TCP aggregates of a family (cluster.BigTCPOff).
	off4, off6 := d.f.Cluster.BigTCPOff(n)
	if !has4 {
		off4 = off6
	}
	if !has6 {
		off6 = off4
	}
	switch {
	case !veth:
		n.BigTCPReason = fmt.Sprintf("off: %s endpoints", n.DeviceType)
	case off4 != "" && off6 != "":
		if off4 == off6 {
			n.BigTCPReason = off4
		} else {
			n.BigTCPReason = "ipv4 " + off4 + "; ipv6 " + off6
		}
	case c == nil:
		n.BigTCPReason = "off: not calibrated on this node yet (xlane calibrate)"
	case c.BigTCPMode != "" && model.Mode(c.BigTCPMode) != n.Mode:
		// Measured on another mode's endpoints: no measurement for this one.
		n.BigTCPReason = fmt.Sprintf("off: the calibration measured BIG TCP on mode %s, this network runs %s", c.BigTCPMode, n.Mode)
	default:
		n.BigTCP4 = has4 && c.BigTCP4 && d.feat.Has(features.BigTCPv4) && off4 == ""
		n.BigTCP6 = has6 && c.BigTCP6 && d.feat.Has(features.BigTCPv6) && off6 == ""
		n.BigTCPReason = fmt.Sprintf("ipv4 %s, ipv6 %s: as measured on this node (calibrated %s)",
			onOff(n.BigTCP4), onOff(n.BigTCP6), c.At.Format("2006-01-02T15:04:05Z"))
		for _, o := range []struct{ fam, why string }{{"ipv4", off4}, {"ipv6", off6}} {
			if o.why != "" {
				n.BigTCPReason += "; " + o.fam + " " + o.why
			}
		}
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// applyBigTCP sets an endpoint's veth to its network's BIG TCP sizes. A
// veth-only endpoint's container side got them when xlane created the
// pair, before the runtime moved it where xlane cannot reach (a restart
// re-applying them then finds it out of reach): the host side is set and
// that is not an error.
func applyBigTCP(e *model.Endpoint, n *model.Network, host netlink.Link) error {
	if host.Type() != "veth" || (!n.BigTCP4 && !n.BigTCP6) {
		return nil
	}
	err := netconf.SetBigTCP(e, host, n.BigTCP4, n.BigTCP6)
	if e.VethOnly() && errors.Is(err, netconf.ErrPeerUnreachable) {
		return nil
	}
	return err
}
