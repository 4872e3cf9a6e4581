package datapath

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// NodeConfig is what the datapath needs to know about the node.
type NodeConfig struct {
	UplinkIfindex int
	// Masquerade addresses (usually the uplink's first global addresses);
	// an invalid one disables masquerade for that family.
	MasqV4, MasqV6 netip.Addr
	// NATPorts is the inclusive source-port range masquerade allocates
	// from; it must not overlap the node's ip_local_port_range.
	NATPortMin, NATPortMax uint16
	// NetnsCookie is the node netns' cookie: socket hooks act only there.
	NetnsCookie uint64
	// ClusterV4 and ClusterV6 are this node's addresses in the cluster
	// (the first address of each of its pod CIDRs; invalid: none): the
	// source of a flow from off the node whose service backend is another
	// node's pod, so that the reply comes back through this node
	// (bpf/lib/ct_nat.h ct_publish).
	ClusterV4, ClusterV6 netip.Addr
	// NoBackendReject answers a new flow to a service VIP without
	// backends (a TCP RST, an ICMP port unreachable) instead of dropping
	// it (bpf/lib/ct_nat.h ct_no_backend).
	NoBackendReject bool
}

// ClashPortMin and ClashPortMax bound the source ports a DNAT flow whose
// reply tuple clashed with another flow's is remapped to, the client's
// address kept (as Linux's NAT does): the node's own ports are no concern
// there, and a wide range is what lets closed flows to a backend that
// several VIPs share keep their tuples for its TIME_WAIT (CTHold).
const (
	ClashPortMin = 1024
	ClashPortMax = 65535
)

// SetConfig writes xlane_config.
func (d *BPF) SetConfig(c NodeConfig) error {
	v := bpf.Config{UplinkIfindex: uint32(c.UplinkIfindex), NatPortMin: c.NATPortMin, NatPortMax: c.NATPortMax,
		ClashPortMin: ClashPortMin, ClashPortMax: ClashPortMax, NetnsCookie: c.NetnsCookie}
	if c.MasqV4.IsValid() {
		v.UplinkV4 = c.MasqV4.As16()
	}
	if c.MasqV6.IsValid() {
		v.UplinkV6 = c.MasqV6.As16()
	}
	if c.ClusterV4.IsValid() {
		v.ClusterV4 = c.ClusterV4.As16()
	}
	if c.ClusterV6.IsValid() {
		v.ClusterV6 = c.ClusterV6.As16()
	}
	if c.NoBackendReject {
		v.Flags |= bpf.ConfigNoBackendReject
	}
	zero := uint32(0)
	if err := d.objs.Config().Put(&zero, &v); err != nil {
		return fmt.Errorf("write datapath config: %w", err)
	}
	return nil
}

const uplinkTCSuffix = "uplinktc"

// AttachUplinkTC attaches the uplink's tcx ingress program (reverse NAT,
// published ports), adopting a pinned link of its own.
func (d *BPF) AttachUplinkTC(ifname string, ifindex int) error {
	return d.attachHook(ifname, ifindex, hook{uplinkTCSuffix, "tcx", ebpf.AttachTCXIngress, 0, (*bpf.Objects).TCFromUplink})
}

// DetachUplinkTC removes it (missing is fine).
func (d *BPF) DetachUplinkTC(ifname string) error {
	return d.detachHook(ifname, hook{suffix: uplinkTCSuffix})
}

// AttachSockLB attaches the socket hooks (connect, and UDP's sendmsg and
// recvmsg) to the cgroup at path (the
// cgroup2 root: every process of the node; the programs themselves act
// only in the node's netns).
func (d *BPF) AttachSockLB(cgroupPath string) error {
	for _, h := range []struct {
		suffix string
		attach ebpf.AttachType
		prog   *ebpf.Program
	}{
		{"connect4", ebpf.AttachCGroupInet4Connect, d.objs.Connect4()},
		{"connect6", ebpf.AttachCGroupInet6Connect, d.objs.Connect6()},
		{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, d.objs.Sendmsg4()},
		{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, d.objs.Sendmsg6()},
		{"recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, d.objs.Recvmsg4()},
		{"recvmsg6", ebpf.AttachCGroupUDP6Recvmsg, d.objs.Recvmsg6()},
	} {
		pin := d.linkPin("cgroup", h.suffix)
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			err := l.Update(h.prog)
			l.Close()
			if err == nil {
				continue
			}
			os.Remove(pin)
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupPath, Attach: h.attach, Program: h.prog})
		if err != nil {
			return fmt.Errorf("attach %s to cgroup %s: %w", h.suffix, cgroupPath, err)
		}
		err = l.Pin(pin)
		l.Close()
		if err != nil {
			return fmt.Errorf("pin %s link: %w", h.suffix, err)
		}
	}
	return nil
}
