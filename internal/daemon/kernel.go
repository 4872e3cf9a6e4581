package daemon

import (
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
)

// What this kernel can do decides, per network, which datapath mode and
// which endpoint device run: a mode or device whose feature is missing is
// refused with the reason (or, for auto, not chosen), and tc mode falls back
// from tcx links to legacy tc filters. Nothing half-works.

// probeKernel logs the kernel's features (probed once, by Open, unless
// already set) and picks the tc attachment they allow.
func (d *Daemon) probeKernel() {
	if d.feat == nil {
		d.feat = features.Probe()
	}
	var missing []string
	for _, f := range d.feat.Features {
		if !f.Available {
			missing = append(missing, f.Name)
		}
	}
	d.log.Info("kernel features probed", "kernel", d.feat.Kernel, "missing", strings.Join(missing, ","))
	if !d.feat.Has(features.TCX) && d.feat.Has(features.TCClsact) && d.dp.UseLegacyTC(true) == nil {
		d.log.Info("tc mode: no tcx on this kernel; attaching cls_bpf filters on clsact instead")
	}
}

// modeMissing says why mode cannot run on this node, or nil.
func (d *Daemon) modeMissing(m model.Mode) error {
	if !m.BPF() || m == model.ModeAuto {
		return nil
	}
	if err := d.dp.Available(); err != nil {
		return err
	}
	switch m {
	case model.ModeTC:
		if !d.feat.Has(features.TCX) && !d.feat.Has(features.TCClsact) {
			return fmt.Errorf("%v; %v", d.feat.Missing(features.TCX), d.feat.Missing(features.TCClsact))
		}
	case model.ModeXDP, model.ModeXDPGeneric:
		for _, f := range []string{features.XDPLink, features.XDPFrags, features.FIBSkipNeigh} {
			if err := d.feat.Missing(f); err != nil {
				return err
			}
		}
		if err := d.dp.XDPErr(); err != nil {
			return fmt.Errorf("this kernel's verifier refuses the XDP programs: %s", datapath.VerifierSummary(err))
		}
	}
	return nil
}

// resolveDevice fills in n.DeviceType from the requested one: auto takes
// netkit (L3) where the kernel has it and the network needs neither XDP nor
// NAT, else veth;
// netkit asked for explicitly on a kernel without it, or with an XDP mode
// (netkit has no XDP hook: its programs are the datapath), is refused.
//
// Netkit endpoints run the tc pipeline (bpf/lib/skb_endpoint.h), its
// conntrack/NAT stage included, but NAT through netkit has no end-to-end
// test yet: a netkit network does not masquerade unless asked, and refuses
// when asked, rather than promise what is unchecked.
func (d *Daemon) resolveDevice(n *model.Network, req api.NetworkCreate) error {
	dev, err := model.ParseDeviceType(req.Device)
	if err != nil {
		return err
	}
	if dev == model.DeviceAuto {
		dev = model.DeviceVeth
		if d.feat.Has(features.Netkit) && !n.Mode.XDP() && !n.Masquerade {
			dev = model.DeviceNetkit
		}
	}
	if dev.Netkit() {
		if err := d.feat.Missing(features.Netkit); err != nil {
			return fmt.Errorf("device %s: %v: %w", dev, err, model.ErrUnavailable)
		}
		if n.Mode.XDP() {
			return model.Fieldf("device", "%s: mode %s needs veth endpoints (netkit devices have no XDP hook; their netkit programs are the fast path: use mode tc)", dev, n.Mode)
		}
		if req.Masquerade != nil && *req.Masquerade {
			return errNetkitNAT("masquerade")
		}
		n.Masquerade = false
	}
	n.DeviceType = dev
	return nil
}

func errNetkitNAT(field string) error {
	return model.Fieldf(field, "NAT on netkit endpoints is not tested yet (docs/kernels.md): use --device veth for masquerade and published ports")
}

// deviceNAT refuses published ports on a network whose devices cannot
// translate them.
func deviceNAT(n *model.Network) error {
	if n.Devices().Netkit() {
		return errNetkitNAT("port")
	}
	return nil
}

// deviceAllowsMode refuses mode changes a network's device cannot follow:
// a netkit pair's default policy is fixed when it is created (blackhole
// under BPF modes, forward in kernel mode), so switching between kernel and
// tc would leave it dropping or unfiltered.
func (d *Daemon) deviceAllowsMode(n *model.Network, mode model.Mode) error {
	if !n.Devices().Netkit() || mode == n.Mode {
		return nil
	}
	return model.Fieldf("mode", "%s: network %q has %s endpoints, whose default policy is fixed for mode %s: create a new network", mode, n.Name, n.Devices(), n.Mode)
}

// ensureDevice creates (or finds) the endpoint's device pair.
func (d *Daemon) ensureDevice(e *model.Endpoint, n *model.Network) (netlink.Link, error) {
	if e.AFXDP() {
		return netconf.EnsurePort(e, n.MTU)
	}
	if e.VM {
		return netconf.EnsureTap(e, n.MTU)
	}
	dev := n.Devices()
	if !dev.Netkit() {
		return netconf.EnsureVeth(e, n.MTU)
	}
	if dev == model.DeviceNetkit && e.MAC != "" && e.MAC != zeroMAC {
		return nil, model.Fieldf("mac", "%q: netkit endpoints in L3 mode have no MAC address (use --device netkit-l2)", e.MAC)
	}
	return netconf.EnsureNetkit(e, n.MTU, dev, n.Mode.BPF())
}

const zeroMAC = "00:00:00:00:00:00"

// attachPrograms gives the endpoint's host device the programs of the
// network's mode: tcx (or legacy tc) and XDP hooks on a veth, netkit
// programs on a netkit primary.
func (d *Daemon) attachPrograms(e *model.Endpoint, n *model.Network, host netlink.Link) error {
	if n.Devices().Netkit() && !e.VM {
		if len(e.Ports) > 0 {
			return deviceNAT(n)
		}
		if n.Mode != model.ModeTC {
			return fmt.Errorf("endpoint %s: mode %s on %s: %w", e.ID, n.Mode, n.Devices(), model.ErrUnavailable)
		}
		return d.dp.AttachNetkit(e.HostIf, host.Attrs().Index)
	}
	return d.dp.Attach(e.HostIf, host.Attrs().Index, n.Mode)
}

// modeStatuses says which modes run here, and why not.
func (d *Daemon) modeStatuses() []api.ModeStatus {
	var out []api.ModeStatus
	for _, m := range model.Modes {
		if m == model.ModeAuto {
			continue
		}
		st := api.ModeStatus{Mode: m, Available: true}
		if err := d.modeMissing(m); err != nil {
			st.Available, st.Reason = false, err.Error()
		} else if m == model.ModeTC && d.dp.LegacyTC() {
			st.Reason = "legacy tc (cls_bpf on clsact): no tcx on this kernel"
		}
		out = append(out, st)
	}
	return out
}

// kernelStatus fills in the probed features.
func (d *Daemon) kernelStatus(st *api.Status) {
	if d.feat == nil {
		return
	}
	st.Kernel = d.feat.Kernel
	for _, f := range d.feat.Features {
		st.Features = append(st.Features, api.Feature{Name: f.Name, Available: f.Available, Since: f.Since, Detail: f.Detail, Uses: f.Uses})
	}
}
