// Package vlantag makes a device an 802.1Q access port with two tc
// programs of its own, for the tests (test/e2e) and the benchmarks
// (bench/multinode) on a kernel without 802.1Q devices nor the tc vlan
// action (CONFIG_VLAN_8021Q and CONFIG_NET_ACT_VLAN off, as on the
// development kernel): what the device sends leaves tagged
// (bpf_skb_vlan_push, egress), what it receives must carry the VID and
// loses the tag (bpf_skb_vlan_pop, ingress), anything else is dropped.
//
// Written here, apart from xlane's datapath, so a test does not check
// xlane's tagging with itself.
package vlantag

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Attach makes dev in the network namespace at nsPath an access port of
// VLAN vid (1-4094). The programs stay attached until close (tcx, 6.6+)
// or, on older kernels (legacy tc filters), until the device goes; close
// releases what Attach holds either way. On failure nothing is left
// attached.
func Attach(nsPath, dev string, vid uint16) (close func() error, err error) {
	if vid < 1 || vid > 4094 {
		return nil, fmt.Errorf("vlantag: vid %d: want 1-4094", vid)
	}
	const (
		tcOK, tcShot          = 0, 2
		offVLANPresent        = 20 // struct __sk_buff
		offVLANTCI            = 24
		ethP8021QNetworkOrder = 0x0081 // htons(ETH_P_8021Q) on little-endian
	)
	push := asm.Instructions{
		asm.Mov.Imm(asm.R2, ethP8021QNetworkOrder),
		asm.Mov.Imm(asm.R3, int32(vid)),
		asm.FnSkbVlanPush.Call(),
		asm.Mov.Imm(asm.R0, tcOK),
		asm.Return(),
	}
	pop := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, offVLANPresent, asm.Word),
		asm.JEq.Imm(asm.R2, 0, "drop"),
		asm.LoadMem(asm.R2, asm.R1, offVLANTCI, asm.Word),
		asm.And.Imm(asm.R2, 0xfff),
		asm.JNE.Imm(asm.R2, int32(vid), "drop"),
		asm.FnSkbVlanPop.Call(),
		asm.Mov.Imm(asm.R0, tcOK),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcShot).WithSymbol("drop"),
		asm.Return(),
	}
	var closers []func() error
	closeAll := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		closers = nil
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("vlantag: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("vlantag: netns %s: %w", nsPath, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return nil, fmt.Errorf("vlantag: enter %s: %w", nsPath, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("vlantag: back to the original netns: %v", err)) // the thread is unusable
		}
	}()
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("vlantag: %s in %s: %w", dev, nsPath, err)
	}
	for _, p := range []struct {
		insns  asm.Instructions
		attach ebpf.AttachType
		parent uint32 // legacy tc (no tcx: before 6.6)
	}{{push, ebpf.AttachTCXEgress, netlink.HANDLE_MIN_EGRESS}, {pop, ebpf.AttachTCXIngress, netlink.HANDLE_MIN_INGRESS}} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: p.insns})
		if err != nil {
			return nil, fmt.Errorf("vlantag: load: %w", err)
		}
		closers = append(closers, prog.Close)
		lk, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: prog, Attach: p.attach})
		if errors.Is(err, ebpf.ErrNotSupported) {
			q := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
			if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, fmt.Errorf("vlantag: clsact on %s: %w", dev, err)
			}
			f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: p.parent,
				Handle: 1, Protocol: unix.ETH_P_ALL, Priority: 1}, Fd: prog.FD(), Name: "vlantag", DirectAction: true}
			if err := netlink.FilterAdd(f); err != nil {
				return nil, fmt.Errorf("vlantag: tc filter on %s: %w", dev, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("vlantag: attach to %s: %w", dev, err)
		}
		closers = append(closers, lk.Close)
	}
	return closeAll, nil
}
