package features

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	cfeatures "github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Feature names.
const (
	TCX          = "tcx"            // tcx links (tc mode's attach)
	TCClsact     = "tc-clsact"      // clsact qdisc + cls_bpf direct-action (tc mode fallback)
	Netkit       = "netkit"         // netkit devices and netkit links
	XDPLink      = "xdp-link"       // XDP attached through a bpf_link
	XDPFrags     = "xdp-frags"      // multi-buffer XDP programs (xdp.frags)
	FIBSkipNeigh = "fib-skip-neigh" // bpf_fib_lookup(BPF_FIB_LOOKUP_SKIP_NEIGH), the XDP modes' FIB lookup
	BigTCPv6     = "big-tcp-ipv6"   // gso_max_size above 64 KiB
	BigTCPv4     = "big-tcp-ipv4"   // gso_ipv4_max_size above 64 KiB
	Sockmap      = "sockmap"        // SOCKHASH maps and sk_msg programs
	SockmapLink  = "sockmap-link"   // sk_msg programs attached through a bpf_link
)

// Feature is one probe's result.
type Feature struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Since is the oldest kernel of the matrix that has it (docs/kernels.md).
	Since string `json:"since,omitempty"`
	// Detail says why a feature is missing (the probe's error).
	Detail string `json:"detail,omitempty"`
	// Uses says what in xlane depends on it.
	Uses string `json:"uses,omitempty"`
}

// Set is what one kernel offers.
type Set struct {
	Kernel   string    `json:"kernel"`
	Features []Feature `json:"features"`
}

// Get returns the named feature (unavailable if never probed).
func (s *Set) Get(name string) Feature {
	if s != nil {
		for _, f := range s.Features {
			if f.Name == name {
				return f
			}
		}
	}
	return Feature{Name: name, Detail: "not probed"}
}

// Has reports whether the named feature is available.
func (s *Set) Has(name string) bool { return s.Get(name).Available }

// Missing returns an error naming the feature and why it is missing, or nil.
func (s *Set) Missing(name string) error {
	f := s.Get(name)
	if f.Available {
		return nil
	}
	msg := fmt.Sprintf("kernel %s lacks %s", s.kernel(), name)
	if f.Since != "" {
		msg += " (the kernel matrix has it from " + f.Since + " on)"
	}
	if f.Detail != "" {
		msg += ": " + f.Detail
	}
	return errors.New(msg)
}

func (s *Set) kernel() string {
	if s == nil || s.Kernel == "" {
		return "?"
	}
	return s.Kernel
}

type probe struct {
	name, since, uses string
	run               func(*env) error
}

// The probes, in the order `xlane status` shows them. Since is filled in
// from the kernel matrix (docs/kernels.md), not from memory.
var probes = []probe{
	{TCX, "6.12", "tc mode on veth (else tc-clsact)", probeTCX},
	{TCClsact, "6.1", "tc mode on kernels without tcx", probeClsact},
	{Netkit, "6.12", "netkit endpoints (--device netkit)", probeNetkit},
	{XDPLink, "6.1", "xdp and xdp-generic modes", probeXDPLink},
	{XDPFrags, "6.1", "xdp modes (programs are xdp.frags)", probeXDPFrags},
	{FIBSkipNeigh, "6.1", "xdp modes (FIB lookup without the neighbour table)", probeFIBSkipNeigh},
	{BigTCPv6, "6.1", "BIG TCP on endpoint devices, IPv6", probeBigTCPv6},
	{BigTCPv4, "6.12", "BIG TCP on endpoint devices, IPv4", probeBigTCPv4},
	{Sockmap, "6.1", "socket acceleration", probeSockmap},
	{SockmapLink, "6.12", "socket acceleration attached as bpf_link", probeSockmapLink},
}

// Probe runs every probe in a private network namespace.
func Probe() *Set {
	s := &Set{Kernel: release()}
	res := make([]error, len(probes))
	err := inPrivateNetns(func() error {
		e := &env{}
		defer e.close()
		for i, p := range probes {
			res[i] = p.run(e)
		}
		return nil
	})
	for i, p := range probes {
		f := Feature{Name: p.name, Since: p.since, Uses: p.uses}
		if err != nil {
			f.Detail = "probe namespace: " + err.Error()
		} else if res[i] != nil {
			f.Detail = res[i].Error()
		} else {
			f.Available = true
		}
		s.Features = append(s.Features, f)
	}
	return s
}

func release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// inPrivateNetns runs fn on a thread of its own in a new network
// namespace. The thread is never unlocked, so Go ends it when fn returns,
// and the namespace (with every device the probes made) goes with it.
//
// Except the process's main thread: Go cannot end it and wedges it instead,
// in the probe's namespace, where /proc/<pid>/ns/net would then point. A
// goroutine that lands there holds it (locked) while a nested one, which
// can therefore run on any thread but the main one, does the work.
func inPrivateNetns(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			errc <- inPrivateNetns(fn)
			runtime.UnlockOSThread()
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// env holds what several probes share: a veth pair and a trivial program
// of each type, made on first use.
type env struct {
	veth     netlink.Link
	vethErr  error
	progs    map[ebpf.ProgramType]*ebpf.Program
	closers  []func()
	vethDone bool
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func (e *env) vethLink() (netlink.Link, error) {
	if e.vethDone {
		return e.veth, e.vethErr
	}
	e.vethDone = true
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlprobe0"}, PeerName: "xlprobe1"}
	if err := netlink.LinkAdd(v); err != nil {
		e.vethErr = fmt.Errorf("create veth: %w", err)
		return nil, e.vethErr
	}
	e.veth, e.vethErr = netlink.LinkByName("xlprobe0")
	if e.vethErr == nil {
		netlink.LinkSetUp(e.veth)
	}
	return e.veth, e.vethErr
}

// prog returns a program of type t that returns ret (passes, for tc and XDP).
func (e *env) prog(t ebpf.ProgramType, attach ebpf.AttachType, flags uint32, ret int32) (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: t, AttachType: attach, Flags: flags, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load %s program: %w", t, err)
	}
	e.closers = append(e.closers, func() { p.Close() })
	return p, nil
}

func notSupported(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return errors.New("not supported by this kernel")
	}
	return err
}

func probeTCX(e *env) error {
	v, err := e.vethLink()
	if err != nil {
		return err
	}
	p, err := e.prog(ebpf.SchedCLS, ebpf.AttachTCXIngress, 0, -1)
	if err != nil {
		return err
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: v.Attrs().Index, Program: p, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return notSupported(err)
	}
	return l.Close()
}

func probeClsact(e *env) error {
	v, err := e.vethLink()
	if err != nil {
		return err
	}
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: v.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscAdd(q); err != nil {
		return fmt.Errorf("add clsact qdisc: %w", err)
	}
	p, err := e.prog(ebpf.SchedCLS, ebpf.AttachNone, 0, -1)
	if err != nil {
		return err
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: v.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS,
			Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL,
		},
		Fd: p.FD(), Name: "xlane_probe", DirectAction: true,
	}
	if err := netlink.FilterAdd(f); err != nil {
		return fmt.Errorf("add cls_bpf filter: %w", err)
	}
	return nil
}

func probeNetkit(e *env) error {
	nk := &netlink.Netkit{
		LinkAttrs: netlink.LinkAttrs{Name: "xlprobenk0"},
		Mode:      netlink.NETKIT_MODE_L3,
		Policy:    netlink.NETKIT_POLICY_BLACKHOLE, PeerPolicy: netlink.NETKIT_POLICY_BLACKHOLE,
	}
	nk.SetPeerAttrs(&netlink.LinkAttrs{Name: "xlprobenk1"})
	if err := netlink.LinkAdd(nk); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return errors.New("no netkit device driver (CONFIG_NETKIT)")
		}
		return fmt.Errorf("create netkit pair: %w", err)
	}
	l, err := netlink.LinkByName("xlprobenk0")
	if err != nil {
		return err
	}
	for _, at := range []ebpf.AttachType{ebpf.AttachNetkitPrimary, ebpf.AttachNetkitPeer} {
		p, err := e.prog(ebpf.SchedCLS, at, 0, -1)
		if err != nil {
			return err
		}
		nl, err := link.AttachNetkit(link.NetkitOptions{Interface: l.Attrs().Index, Program: p, Attach: at})
		if err != nil {
			return fmt.Errorf("attach netkit %s: %w", at, notSupported(err))
		}
		nl.Close()
	}
	return nil
}

func probeXDPLink(e *env) error {
	v, err := e.vethLink()
	if err != nil {
		return err
	}
	p, err := e.prog(ebpf.XDP, ebpf.AttachXDP, 0, 2) // XDP_PASS
	if err != nil {
		return err
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p, Interface: v.Attrs().Index, Flags: link.XDPDriverMode})
	if err != nil {
		return notSupported(err)
	}
	return l.Close()
}

func probeXDPFrags(e *env) error {
	v, err := e.vethLink()
	if err != nil {
		return err
	}
	p, err := e.prog(ebpf.XDP, ebpf.AttachXDP, unix.BPF_F_XDP_HAS_FRAGS, 2)
	if err != nil {
		return err
	}
	// A frags program on a device with a jumbo MTU is what it is for.
	if err := netlink.LinkSetMTU(v, 9000); err != nil {
		return fmt.Errorf("set mtu 9000: %w", err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p, Interface: v.Attrs().Index, Flags: link.XDPDriverMode})
	if err != nil {
		return fmt.Errorf("attach with mtu 9000: %w", notSupported(err))
	}
	return l.Close()
}

// probeFIBSkipNeigh runs bpf_fib_lookup from an XDP program with and
// without BPF_FIB_LOOKUP_SKIP_NEIGH: kernels that do not know the flag
// answer -EINVAL for it at run time (the program loads either way).
func probeFIBSkipNeigh(e *env) error {
	run := func(flags int32) (uint32, error) {
		insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1), asm.Mov.Imm(asm.R0, 0)}
		for off := int16(-64); off < 0; off += 8 {
			insns = append(insns, asm.StoreMem(asm.R10, off, asm.R0, asm.DWord))
		}
		insns = append(insns,
			asm.StoreImm(asm.R10, -64, unix.AF_INET, asm.Byte), // family
			asm.StoreImm(asm.R10, -56, 1, asm.Word),            // ifindex: lo
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -64),
			asm.Mov.Imm(asm.R3, 64),
			asm.Mov.Imm(asm.R4, flags),
			asm.FnFibLookup.Call(),
			asm.Return(),
		)
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "Dual BSD/GPL", Instructions: insns})
		if err != nil {
			return 0, fmt.Errorf("load fib lookup program: %w", err)
		}
		defer p.Close()
		return p.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	}
	const skipNeigh = 1 << 2
	base, err := run(0)
	if err != nil {
		return err
	}
	got, err := run(skipNeigh)
	if err != nil {
		return err
	}
	einval := ^uint32(unix.EINVAL) + 1 // -EINVAL as the u32 return value
	// An unknown flag must be refused, or the probe tells nothing.
	bogus, err := run(1 << 30)
	if err != nil {
		return err
	}
	switch {
	case base == einval || bogus != einval:
		return fmt.Errorf("cannot tell: lookup returned %d without flags, %d with an unknown flag", int32(base), int32(bogus))
	case got == einval:
		return errors.New("bpf_fib_lookup rejects BPF_FIB_LOOKUP_SKIP_NEIGH (-EINVAL)")
	}
	return nil
}

const bigGSO = 128 << 10

func probeBigTCPv6(e *env) error {
	v, err := e.vethLink()
	if err != nil {
		return err
	}
	if err := netlink.LinkSetGSOMaxSize(v, bigGSO); err != nil {
		return fmt.Errorf("set gso_max_size %d: %w", bigGSO, err)
	}
	return readBack(v.Attrs().Name, func(a *netlink.LinkAttrs) uint32 { return a.GSOMaxSize }, "gso_max_size")
}

func probeBigTCPv4(e *env) error {
	v, err := e.vethLink()
	if err != nil {
		return err
	}
	if err := netlink.LinkSetGSOIPv4MaxSize(v, bigGSO); err != nil {
		return fmt.Errorf("set gso_ipv4_max_size %d: %w", bigGSO, err)
	}
	return readBack(v.Attrs().Name, func(a *netlink.LinkAttrs) uint32 { return a.GSOIPv4MaxSize }, "gso_ipv4_max_size")
}

// readBack checks that a size attribute took: kernels that do not know an
// attribute ignore it silently.
func readBack(name string, get func(*netlink.LinkAttrs) uint32, attr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if got := get(l.Attrs()); got != bigGSO {
		return fmt.Errorf("%s reads back %d after setting %d", attr, got, bigGSO)
	}
	return nil
}

func probeSockmap(e *env) error {
	if err := cfeatures.HaveMapType(ebpf.SockHash); err != nil {
		return fmt.Errorf("SOCKHASH map: %w", notSupported(err))
	}
	if err := cfeatures.HaveProgramType(ebpf.SkMsg); err != nil {
		return fmt.Errorf("sk_msg program: %w", notSupported(err))
	}
	return nil
}

func probeSockmapLink(e *env) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockHash, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("create SOCKHASH: %w", err)
	}
	defer m.Close()
	p, err := e.prog(ebpf.SkMsg, ebpf.AttachSkMsgVerdict, 0, 1) // SK_PASS
	if err != nil {
		return err
	}
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: m.FD(), Program: p, Attach: ebpf.AttachSkMsgVerdict})
	if err != nil {
		return fmt.Errorf("link sk_msg to SOCKHASH: %w", notSupported(err))
	}
	return l.Close()
}

// Required lists the features the environment says this kernel must have
// (XLANE_REQUIRE_FEATURES, comma-separated; the kernel matrix sets it per
// leg): a missing one there is a failure, not a skip.
func Required() []string {
	var out []string
	for _, f := range strings.Split(os.Getenv("XLANE_REQUIRE_FEATURES"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Names lists every probed feature.
func Names() []string {
	out := make([]string, len(probes))
	for i, p := range probes {
		out[i] = p.name
	}
	return out
}
