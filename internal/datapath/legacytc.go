package datapath

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Legacy tc: on kernels without tcx (before 6.6; the matrix's 6.1 leg), tc
// mode attaches the same programs as cls_bpf filters in direct-action mode
// on a clsact qdisc. The programs' return codes mean the same there
// (TC_ACT_UNSPEC: carry on to the next filter, then Linux), and
// bpf_redirect_peer works from clsact ingress since 5.10.
//
// A filter is no bpf_link: it stays on the device when xlaned dies (like a
// pinned link), and a restarted daemon replaces it atomically (RTM_NEWTFILTER
// with NLM_F_REPLACE at the same priority and handle). The program is pinned
// where the link would be, so Hooks and AttachedDevices see it.

const (
	legacyPrio   = 1
	legacyHandle = 0x786c // "xl"
)

// UseLegacyTC makes tc mode attach cls_bpf filters instead of tcx links.
func (d *BPF) UseLegacyTC(on bool) error { d.legacyTC = on; return nil }

// LegacyTC reports whether tc mode attaches cls_bpf filters.
func (d *BPF) LegacyTC() bool { return d.legacyTC }

func legacyParent(h hook) uint32 {
	if h.attach == ebpf.AttachTCXEgress {
		return netlink.HANDLE_MIN_EGRESS
	}
	return netlink.HANDLE_MIN_INGRESS
}

func (d *BPF) attachClsact(ifname string, ifindex int, h hook, prog *ebpf.Program, pin string) error {
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add clsact qdisc to %s: %w", ifname, err)
	}
	info, err := prog.Info()
	if err != nil {
		return fmt.Errorf("program info: %w", err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex, Parent: legacyParent(h),
			Handle: legacyHandle, Priority: legacyPrio, Protocol: unix.ETH_P_ALL,
		},
		Fd: prog.FD(), Name: info.Name, DirectAction: true,
	}
	if err := netlink.FilterReplace(f); err != nil {
		return fmt.Errorf("attach tc %s filter to %s: %w", h.suffix, ifname, err)
	}
	if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace pin %s: %w", pin, err)
	}
	// Every device's filter runs the same *ebpf.Program, and Pin of a
	// pinned Program moves its pin (a no-op when the path is the one it
	// has): pinned directly, only the device attached last kept its pin.
	// A clone (a new fd, never pinned) pins each device's own path.
	c, err := prog.Clone()
	if err != nil {
		return fmt.Errorf("pin tc %s program of %s: %w", h.suffix, ifname, err)
	}
	defer c.Close()
	if err := c.Pin(pin); err != nil {
		return fmt.Errorf("pin tc %s program of %s: %w", h.suffix, ifname, err)
	}
	return nil
}

// detachClsact removes xlane's filter (other filters and the qdisc stay)
// and the pin. A missing device or filter is fine.
func (d *BPF) detachClsact(ifname string, h hook, pin string) error {
	if l, err := netlink.LinkByName(ifname); err == nil {
		f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{
			LinkIndex: l.Attrs().Index, Parent: legacyParent(h),
			Handle: legacyHandle, Priority: legacyPrio, Protocol: unix.ETH_P_ALL,
		}}
		if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("remove tc %s filter from %s: %w", h.suffix, ifname, err)
		}
	}
	if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pin %s: %w", pin, err)
	}
	return nil
}
