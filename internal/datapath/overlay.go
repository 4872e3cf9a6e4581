package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// Peer is one cluster prefix of xlane_peers (bpf/lib/overlay.h): a node's
// pod CIDR and how to reach it, this node's own (PeerSelf) or a cluster
// CIDR no node covers (PeerGone: dropped, counted as drop_no_peer).
type Peer struct {
	Prefix   netip.Prefix
	Underlay netip.Addr // invalid for PeerSelf and PeerGone
	NodeID   uint32
	Flags    uint16 // Peer* below
}

// Peer flags (enum xl_peer_flags).
const (
	PeerV6     = bpf.PeerFlagV6
	PeerNative = bpf.PeerFlagNative
	PeerSelf   = bpf.PeerFlagSelf
	PeerGone   = bpf.PeerFlagGone
	PeerDown   = bpf.PeerFlagDown // the daemon's probe finds the node down: drop_peer_down
	// PeerUnencrypted: --encryption-strict and no working WireGuard
	// session with the node: drop_unencrypted.
	PeerUnencrypted = bpf.PeerFlagUnencrypted
)

// OverlayDevice is the collect_md VXLAN device xlaned owns.
const OverlayDevice = "xlvx0"

// VNINode is the VNI of the node's own traffic to peers' pods
// (XL_VNI_NODE): delivered to any network. Networks' VNIs are above it.
const VNINode = 1

func peerKey(p netip.Prefix) bpf.PeerKey {
	p = p.Masked()
	k := bpf.PeerKey{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
	if p.Addr().Is4() {
		k.Prefixlen += 96
	}
	return k
}

// PutPeer writes (or replaces) a cluster prefix.
func (d *BPF) PutPeer(p Peer) error {
	k := peerKey(p.Prefix)
	v := bpf.PeerVal{NodeId: p.NodeID, Flags: p.Flags}
	if p.Underlay.IsValid() {
		v.Underlay = p.Underlay.As16()
		if p.Underlay.Is6() && !p.Underlay.Is4In6() {
			v.Flags |= PeerV6
		}
	}
	if err := d.objs.Peers().Put(&k, &v); err != nil {
		return fmt.Errorf("put peer %s: %w", p.Prefix, err)
	}
	return nil
}

// DeletePeer removes a cluster prefix; missing is fine.
func (d *BPF) DeletePeer(p netip.Prefix) error {
	k := peerKey(p)
	if err := d.objs.Peers().Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete peer %s: %w", p, err)
	}
	return nil
}

// Peers lists xlane_peers.
func (d *BPF) Peers() ([]Peer, error) {
	var (
		k   bpf.PeerKey
		v   bpf.PeerVal
		out []Peer
	)
	it := d.objs.Peers().Iterate()
	for it.Next(&k, &v) {
		a := netip.AddrFrom16(k.Addr)
		bits := int(k.Prefixlen)
		if a.Is4In6() {
			a, bits = a.Unmap(), bits-96
		}
		p := Peer{Prefix: netip.PrefixFrom(a, bits), NodeID: v.NodeId, Flags: v.Flags}
		if v.Flags&(PeerSelf|PeerGone) == 0 {
			p.Underlay = netip.AddrFrom16(v.Underlay).Unmap()
		}
		out = append(out, p)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	return out, nil
}

// SetNetworkVNI maps a network to its VNI and back.
func (d *BPF) SetNetworkVNI(networkID, vni uint32) error {
	if err := d.objs.NetVNI().Put(&networkID, &vni); err != nil {
		return fmt.Errorf("put vni of network %d: %w", networkID, err)
	}
	if err := d.objs.VNINet().Put(&vni, &networkID); err != nil {
		return fmt.Errorf("put network of vni %d: %w", vni, err)
	}
	return nil
}

// DeleteNetworkVNI removes both; missing is fine.
func (d *BPF) DeleteNetworkVNI(networkID, vni uint32) error {
	if err := d.objs.NetVNI().Delete(&networkID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete vni of network %d: %w", networkID, err)
	}
	var owner uint32
	if err := d.objs.VNINet().Lookup(&vni, &owner); err == nil && owner == networkID {
		if err := d.objs.VNINet().Delete(&vni); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete network of vni %d: %w", vni, err)
		}
	}
	return nil
}

const (
	overlayInSuffix  = "overlayin"
	overlayOutSuffix = "overlayout"
)

// AttachOverlay attaches the VXLAN device's programs (adopting pinned
// links of its own) and points the endpoint programs at it.
func (d *BPF) AttachOverlay(ifname string, ifindex int) error {
	if err := d.attachHook(ifname, ifindex, hook{overlayInSuffix, "tcx", ebpf.AttachTCXIngress, 0, (*bpf.Objects).FromOverlay}); err != nil {
		return err
	}
	if err := d.attachHook(ifname, ifindex, hook{overlayOutSuffix, "tcx", ebpf.AttachTCXEgress, 0, (*bpf.Objects).ToOverlay}); err != nil {
		return err
	}
	return d.setOverlay(uint32(ifindex))
}

// DetachOverlay removes them and the device from the programs' view.
func (d *BPF) DetachOverlay(ifname string) error {
	return errors.Join(d.setOverlay(0),
		d.detachHook(ifname, hook{suffix: overlayInSuffix, kind: "tcx", attach: ebpf.AttachTCXIngress}),
		d.detachHook(ifname, hook{suffix: overlayOutSuffix, kind: "tcx", attach: ebpf.AttachTCXEgress}))
}

// OverlayEncap is how the endpoint programs put a packet on the overlay
// (xlane_overlay, bpf/lib/overlay_encap.h): BPF pushes the outer headers
// (UDP destination Port, source Src4 or Src6, this node's underlay
// address of the peer's family; without one, the device tunnels that
// family); otherwise the VXLAN device encapsulates.
//
// EncryptedRx (--encryption-strict): what arrives on the overlay must
// have come through WireGuard, tunnelled from a peer's cluster address
// (else drop_unencrypted).
type OverlayEncap struct {
	BPF         bool
	Port        uint16
	Src4, Src6  netip.Addr
	EncryptedRx bool
}

func (e OverlayEncap) cfg(ifindex uint32) bpf.OverlayCfg {
	c := bpf.OverlayCfg{Ifindex: ifindex}
	if e.EncryptedRx {
		c.Flags |= uint16(bpf.OverlayEncryptedRx)
	}
	if e.BPF {
		c.Flags |= uint16(bpf.OverlayEncapBPF)
		c.Port = e.Port<<8 | e.Port>>8 // network order
		if e.Src4.Is4() {
			c.Src4 = e.Src4.As4()
		}
		if e.Src6.Is6() && !e.Src6.Is4In6() {
			c.Src6 = e.Src6.As16()
		}
	}
	return c
}

// SetOverlayEncap sets how cross-node packets are encapsulated; the VXLAN
// device stays what AttachOverlay set.
func (d *BPF) SetOverlayEncap(e OverlayEncap) error {
	var (
		zero = uint32(0)
		cur  bpf.OverlayCfg
	)
	if err := d.objs.Overlay().Lookup(&zero, &cur); err != nil {
		return fmt.Errorf("read overlay configuration: %w", err)
	}
	c := e.cfg(cur.Ifindex)
	if err := d.objs.Overlay().Put(&zero, &c); err != nil {
		return fmt.Errorf("write overlay encapsulation: %w", err)
	}
	return nil
}

func (d *BPF) setOverlay(ifindex uint32) error {
	var (
		zero = uint32(0)
		c    bpf.OverlayCfg
	)
	if err := d.objs.Overlay().Lookup(&zero, &c); err != nil {
		return fmt.Errorf("read overlay configuration: %w", err)
	}
	c.Ifindex = ifindex
	if err := d.objs.Overlay().Put(&zero, &c); err != nil {
		return fmt.Errorf("write overlay device: %w", err)
	}
	return nil
}

// DeleteFlowsOf deletes the conntrack entries of flows from or to any of
// prefixes (a removed node's pod CIDRs, a removed endpoint's addresses),
// translated ones included: an entry whose NAT rewrites to or from an
// address there goes too (a masqueraded flow's reply entry is keyed by the
// node's address). It returns how many went.
func (d *BPF) DeleteFlowsOf(prefixes []netip.Prefix) (int, error) {
	in := func(a [16]byte) bool {
		ip := netip.AddrFrom16(a).Unmap()
		for _, p := range prefixes {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	return d.deleteCT(func(k *bpf.CTKey, v *bpf.CTVal) bool {
		return in(k.Saddr) || in(k.Daddr) || v.Nat != 0 && (in(v.NatAddr) || in(v.NatSaddr))
	})
}
