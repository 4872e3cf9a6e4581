package vm

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/netconf"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// VM endpoints: a QEMU guest's port is a persistent tap that xlane creates
// and programs as it does a container's host veth (same tc programs, same
// anti-spoofing on the guest's MAC and addresses), and that QEMU opens by
// name (model.Endpoint.QEMUArgs). Nobody configures the guest from the
// outside: it asks for its address by DHCP, which xlaned answers on the tap
// from the endpoint's lease (dhcp.go).
//
// An AF_XDP port (--backend af-xdp) is a veth pair instead: its host end
// is programmed like the tap, its port end stays in the node's namespace
// with xlane's XDP program (bpf/xdp_vmport.c) and a pinned socket map, and
// QEMU binds its AF_XDP sockets there and puts them into the map
// (map-path=): it loads and attaches nothing itself.

// TapPrefix starts the name of every VM endpoint's tap.
const TapPrefix = "xlv"

// TapName derives the tap's name from the endpoint ID, stable across
// restarts like the host veth's.
func TapName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return TapPrefix + hex.EncodeToString(sum[:])[:10]
}

// ValidateEndpoint is the VM feature's check of an endpoint being added
// (core.EndpointValidator): a container's request may not carry the VM
// fields; a VM's gets its tap (an AF_XDP port keeps the veth names the
// core gave it), its queues and backend, a MAC where none was asked for,
// and is refused on a network whose mode cannot carry it.
func (v *VMs) ValidateEndpoint(_ *store.Tx, req *api.EndpointAdd, e *model.Endpoint, n *model.Network) error {
	switch {
	case !req.VM && req.Queues != 0:
		return model.Fieldf("queues", "%d: only VM endpoints (--vm) have queues", req.Queues)
	case !req.VM && req.Backend != "":
		return model.Fieldf("backend", "%q: only VM endpoints (--vm) have a backend", req.Backend)
	case !req.VM:
		return nil
	}
	if err := v.validate(e, req); err != nil {
		return err
	}
	if err := Mode(e, n.Mode); err != nil {
		return err
	}
	if !e.AFXDP() {
		e.HostIf, e.PeerIf = TapName(e.ID), ""
	}
	if e.MAC == "" {
		e.MAC = RandomMAC()
	}
	return nil
}

// validate checks the VM-only fields of an endpoint request and sets e's.
func (v *VMs) validate(e *model.Endpoint, req *api.EndpointAdd) error {
	switch {
	case req.Netns != "":
		return model.Fieldf("netns", "%q: a VM endpoint takes no netns (the guest is behind a tap QEMU opens)", req.Netns)
	case req.VethOnly:
		return model.Fieldf("veth_only", "a VM endpoint has a tap, not a veth")
	case req.Queues < 0 || req.Queues > model.MaxVMQueues:
		return model.Fieldf("queues", "%d: want 1-%d", req.Queues, model.MaxVMQueues)
	}
	if err := v.checkBackend(req.Backend); err != nil {
		return err
	}
	e.VM = true
	e.Queues = max(req.Queues, 1)
	if req.Backend == model.BackendAFXDP {
		e.Backend = model.BackendAFXDP
	}
	return nil
}

// Mode refuses network modes that cannot carry the VM endpoint e: XDP
// modes for every VM endpoint, kernel mode for an AF_XDP port (only xlane's
// XDP program puts frames into QEMU's sockets).
func Mode(e *model.Endpoint, m model.Mode) error {
	if m.XDP() {
		return errVMMode(m)
	}
	if e.AFXDP() && !m.BPF() {
		return model.Fieldf("vm", "network mode %s: an AF_XDP port needs mode tc (xlane's XDP program feeds QEMU's sockets)", m)
	}
	return nil
}

func errVMMode(m model.Mode) error {
	return model.Fieldf("vm", "network mode %s: VM endpoints need mode tc (or kernel, for a tap) (XDP cannot redirect into a tap: it has no NAPI to take the frames)", m)
}

// AttachPort gives an AF_XDP port its program and socket map and records
// the map's pin for QEMU's map-path=.
func (v *VMs) AttachPort(e *model.Endpoint) error {
	port, err := netlink.LinkByName(e.PeerIf)
	if err != nil {
		return fmt.Errorf("find port %s: %w", e.PeerIf, err)
	}
	e.XSKMap, err = v.core.Datapath().AttachVMPort(e.PeerIf, port.Attrs().Index)
	return err
}

// PortInfo adds an AF_XDP port's side to info: the port's program and
// counters, and whether QEMU's sockets are bound.
func (v *VMs) PortInfo(info *api.EndpointInfo, n *model.Network) {
	e := &info.Endpoint
	port, err := netlink.LinkByName(e.PeerIf)
	if err != nil {
		info.State = "port " + e.PeerIf + " missing"
		return
	}
	if ports, err := v.core.Datapath().VMPorts(); err == nil && slices.Contains(ports, e.PeerIf) {
		info.Datapath = append(info.Datapath, "xdp/vmport on "+e.PeerIf)
	}
	if n.Mode.BPF() {
		info.Reasons = append(info.Reasons, v.core.ReasonCounters(port.Attrs().Index)...)
	}
	socks, err := netconf.PortSockets(port.Attrs().Index)
	switch {
	case err != nil:
		// CONFIG_XDP_SOCKETS_DIAG off (this machine's 6.18): nothing
		// tells whether QEMU is attached; drop_no_xsk counts frames
		// that found no socket.
		info.Notes = append(info.Notes, "af-xdp: whether QEMU's sockets are bound is unknown (the kernel cannot list AF_XDP sockets: "+err.Error()+"); drop_no_xsk counts frames for the guest that found none")
	case len(socks) == 0:
		info.State = "waiting for QEMU (no AF_XDP socket bound to " + e.PeerIf + ")"
	default:
		var rxDrop, rxFull uint64
		for _, s := range socks {
			if s.Stats != nil {
				rxDrop, rxFull = rxDrop+s.Stats.RxDropped, rxFull+s.Stats.RxFull
			}
		}
		info.Notes = append(info.Notes, fmt.Sprintf("af-xdp: %d socket(s) bound to %s (of %d queue(s)); socket rx drops %d, rx ring full %d", len(socks), e.PeerIf, e.Queues, rxDrop, rxFull))
	}
}

// RandomMAC is a locally administered unicast MAC for a guest that was
// given none.
func RandomMAC() string {
	b := make([]byte, 6)
	rand.Read(b)
	b[0] = b[0]&^1 | 2
	return net.HardwareAddr(b).String()
}
