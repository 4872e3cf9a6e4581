package main

import (
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// xdpDropAll is the fw benchmark's ceiling variant ("xdp-drop"): a native
// XDP program that counts every frame in a per-CPU array and drops it,
// without parsing. No XDP filter on this veth can drop faster, so its rate
// against iptables' is the most any XDP firewall can show here. With read
// ("xdp-drop-read") it first reads the frame's UDP destination port (the
// 38th byte on): the cost of touching a frame the generator wrote on the
// other CPU, which every filter pays and the bare drop does not.
type xdpDropAll struct {
	counter *ebpf.Map
	prog    *ebpf.Program
	link    link.Link
}

func attachXDPDropAll(nsName, dev string, read bool) (_ *xdpDropAll, err error) {
	x := &xdpDropAll{}
	defer func() {
		if err != nil {
			x.Close()
		}
	}()
	x.counter, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("xdp-drop counter: %w", err)
	}
	var insns asm.Instructions
	if read {
		// if (data + 38 <= data_end) r3 = *(u16 *)(data + 36)
		insns = asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // xdp_md.data
			asm.LoadMem(asm.R4, asm.R1, 4, asm.Word), // xdp_md.data_end
			asm.Mov.Reg(asm.R5, asm.R2),
			asm.Add.Imm(asm.R5, 38),
			asm.JGT.Reg(asm.R5, asm.R4, "count"),
			asm.LoadMem(asm.R3, asm.R2, 36, asm.Half),
		}
	}
	x.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: append(insns, asm.Instructions{
			// *(u64 *)bpf_map_lookup_elem(&counter, &(u32){0}) += 1; return XDP_DROP
			asm.StoreImm(asm.RFP, -4, 0, asm.Word).WithSymbol("count"),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, x.counter.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "drop"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 1).WithSymbol("drop"), // XDP_DROP
			asm.Return(),
		}...),
	})
	if err != nil {
		return nil, fmt.Errorf("xdp-drop program: %w", err)
	}
	err = inNetns(nsName, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", dev, nsName, err)
		}
		x.link, err = link.AttachXDP(link.XDPOptions{Program: x.prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach xdp-drop to %s: %w", dev, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// inNetns runs f on a thread that entered netns nsName (the devices of the
// benchmark live in other namespaces).
func inNetns(nsName string, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(nsName)
	if err != nil {
		return fmt.Errorf("netns %s: %w", nsName, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("enter netns %s: %w", nsName, err)
	}
	defer netns.Set(orig)
	return f()
}

// xdpProgram opens the XDP program attached to dev in netns nsName (nil
// when there is none): its run statistics are the filter's own time per
// packet (-prog-stats).
func xdpProgram(nsName, dev string) (*ebpf.Program, error) {
	var prog *ebpf.Program
	err := inNetns(nsName, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", dev, nsName, err)
		}
		x := l.Attrs().Xdp
		if x == nil || x.ProgId == 0 {
			return nil
		}
		prog, err = ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
		if err != nil {
			return fmt.Errorf("XDP program %d of %s: %w", x.ProgId, dev, err)
		}
		return nil
	})
	return prog, err
}

// Dropped is the frames dropped so far, over all CPUs.
func (x *xdpDropAll) Dropped() (uint64, error) {
	var per []uint64
	if err := x.counter.Lookup(uint32(0), &per); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

func (x *xdpDropAll) Close() error {
	if x.link != nil {
		x.link.Close()
	}
	if x.prog != nil {
		x.prog.Close()
	}
	if x.counter != nil {
		x.counter.Close()
	}
	return nil
}
