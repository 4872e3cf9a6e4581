package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// The programs of an endpoint on a netkit pair, attached through its
// primary (host-side) device as netkit links and pinned like tcx links.
// They have no prog accessor: the netkit objects load on first use
// (AttachNetkit), so kernels without netkit never load them.
var (
	hookNetkitPeer    = hook{"nkpeer", "netkit", ebpf.AttachNetkitPeer, 0, nil}
	hookNetkitPrimary = hook{"nkprimary", "netkit", ebpf.AttachNetkitPrimary, 0, nil}
)

func (d *BPF) netkitObjects() (*bpf.NetkitObjects, error) {
	if d.nk == nil {
		nk, err := d.objs.LoadNetkit()
		if err != nil {
			return nil, err
		}
		d.nk = nk
	}
	return d.nk, nil
}

// AttachNetkit gives a netkit primary xlane's programs: the peer program
// (what the container sends: the tc pipeline) and the primary program
// (what enters the container: counted). The pair was created with the
// blackhole policy, so until both are attached nothing flows. Pinned links
// of an earlier daemon get the current programs swapped in atomically; any
// tc or XDP pin left under the device's name goes.
func (d *BPF) AttachNetkit(ifname string, ifindex int) error {
	nk, err := d.netkitObjects()
	if err != nil {
		return err
	}
	for _, x := range []struct {
		h    hook
		prog *ebpf.Program
	}{{hookNetkitPrimary, nk.ToEndpoint}, {hookNetkitPeer, nk.FromEndpoint}} {
		if err := d.attachNetkitHook(ifname, ifindex, x.h, x.prog); err != nil {
			return err
		}
	}
	for _, h := range allHooks {
		if h.kind != "netkit" {
			if err := d.detachHook(ifname, h); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *BPF) attachNetkitHook(ifname string, ifindex int, h hook, prog *ebpf.Program) error {
	pin := d.linkPin(ifname, h.suffix)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		same := false
		if info, err := l.Info(); err == nil && info.Netkit() != nil {
			same = int(info.Netkit().Ifindex) == ifindex && ebpf.AttachType(info.Netkit().AttachType) == h.attach
		}
		if same {
			err := l.Update(prog)
			l.Close()
			if err != nil {
				return fmt.Errorf("update netkit %s program on %s: %w", h.suffix, ifname, err)
			}
			return nil
		}
		l.Unpin()
		l.Close()
	}
	l, err := link.AttachNetkit(link.NetkitOptions{Interface: ifindex, Program: prog, Attach: h.attach})
	if err != nil {
		return fmt.Errorf("attach netkit %s program to %s: %w", h.suffix, ifname, err)
	}
	err = l.Pin(pin)
	l.Close()
	if err != nil {
		return fmt.Errorf("pin netkit %s link of %s: %w", h.suffix, ifname, err)
	}
	return nil
}
