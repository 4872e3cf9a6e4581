package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/model"
)

// ErrNoTCX is returned where the kernel lacks tcx (Linux < 6.6).
var ErrNoTCX = errors.New("tc mode needs tcx links (Linux 6.6 or later)")

// BPF is the real Datapath of one daemon instance. It owns, for the tc,
// xdp, xdp-generic and netkit modes alike: the loaded collections
// (internal/bpf), every pin under pinDir (maps/, links/, node/; the
// firewall's maps included, handed out by FirewallMaps), the links that
// attach the programs to host devices and to the uplink, and the clock the
// conntrack code compares deadlines with. No other package of xlaned opens
// a pin (tests and benchmarks read some maps from outside the process).
type BPF struct {
	pinDir     string
	objs       *bpf.Objects
	maglevSize uint32
	// legacyTC: tc mode attaches cls_bpf filters (no tcx); legacytc.go.
	legacyTC bool
	// nk: the netkit programs, loaded on first use; netkit.go.
	nk *bpf.NetkitObjects
	// accel, proxy: the socket layer, loaded on first use; accel.go, proxy.go.
	accel *bpf.AccelObjects
	proxy *bpf.ProxyObjects
	// clock overrides ktime.Now (tests: a clock a few seconds past
	// boot); ctclock.go.
	clock func() uint64
	// shared: which backends several services balance to (cthold.go).
	shared sharedBackends
}

// Open loads the programs and adopts (or creates) the maps pinned under
// pinDir/maps.
func Open(pinDir string, o bpf.Options) (*BPF, error) {
	if err := ensureBPFFS(pinDir); err != nil {
		return nil, err
	}
	objs, err := bpf.Load(filepath.Join(pinDir, "maps"), o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(pinDir, "node"), 0o700); err != nil {
		objs.Close()
		return nil, fmt.Errorf("create node pin dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(pinDir, "links"), 0o700); err != nil {
		objs.Close()
		return nil, fmt.Errorf("create link pin dir: %w", err)
	}
	// MaglevSize 0: each service's table sized for its backends.
	return &BPF{pinDir: pinDir, objs: objs, maglevSize: o.MaglevSize}, nil
}

// bpffsRoot is where Linux conventionally mounts the BPF filesystem.
const bpffsRoot = "/sys/fs/bpf"

// ensureBPFFS checks that pinDir is (or will be created) on a BPF
// filesystem. When nothing is mounted on /sys/fs/bpf and pinDir is below
// it, it mounts bpffs there, as systemd and Cilium do.
func ensureBPFFS(pinDir string) error {
	dir := filepath.Clean(pinDir)
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("pin dir %s: %w", pinDir, err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	under := strings.HasPrefix(filepath.Clean(pinDir)+"/", bpffsRoot+"/")
	if !under || dir != bpffsRoot {
		return fmt.Errorf("pin dir %s: %w (mount one: mount -t bpf bpf DIR)", pinDir, bpf.ErrPinDir)
	}
	if err := unix.Mount("bpf", bpffsRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w", bpffsRoot, err)
	}
	return nil
}

// Close releases this process' references; pinned objects stay.
func (d *BPF) Close() error {
	if d.nk != nil {
		d.nk.Close()
	}
	if d.accel != nil {
		d.accel.Close()
	}
	if d.proxy != nil {
		d.proxy.Close()
	}
	return d.objs.Close()
}

// hook is one program attachment on a host veth. Its pin name says what it
// is, so a restarted daemon knows what it adopts.
type hook struct {
	suffix string
	kind   string // "tcx" or "xdp"
	attach ebpf.AttachType
	flags  link.XDPAttachFlags
	prog   func(*bpf.Objects) *ebpf.Program
}

var (
	hookTCIngress  = hook{"ingress", "tcx", ebpf.AttachTCXIngress, 0, (*bpf.Objects).FromEndpoint}
	hookTCEgress   = hook{"egress", "tcx", ebpf.AttachTCXEgress, 0, (*bpf.Objects).ToEndpoint}
	hookXDP        = hook{"xdp", "xdp", 0, link.XDPDriverMode, (*bpf.Objects).XDPFromEndpoint}
	hookXDPGeneric = hook{"xdpgeneric", "xdp", 0, link.XDPGenericMode, (*bpf.Objects).XDPGenericFromEndpoint}
	allHooks       = []hook{hookXDP, hookXDPGeneric, hookTCIngress, hookTCEgress, hookNetkitPeer, hookNetkitPrimary}
)

// hooksFor lists what a mode attaches. The tcx egress hook counts what
// Linux delivers to the endpoint in every BPF mode; in the XDP modes the
// tcx ingress program handles what XDP passes on (NAT flows, and the
// rest as in tc mode).
func hooksFor(mode model.Mode) []hook {
	switch mode {
	case model.ModeTC:
		return []hook{hookTCIngress, hookTCEgress}
	case model.ModeXDP:
		return []hook{hookXDP, hookTCIngress, hookTCEgress}
	case model.ModeXDPGeneric:
		return []hook{hookXDPGeneric, hookTCIngress, hookTCEgress}
	}
	return nil
}

func hasHook(hs []hook, h hook) bool {
	return slices.ContainsFunc(hs, func(x hook) bool { return x.suffix == h.suffix })
}

// nodeHooks are attachments of the node, not of an endpoint: pinned under
// node/, apart from the per-device links/ that reconcile prunes.
var nodeHooks = map[string]bool{"uplink": true, "uplinktc": true, "connect4": true, "connect6": true,
	"sendmsg4": true, "sendmsg6": true, "recvmsg4": true, "recvmsg6": true}

func (d *BPF) linkPin(ifname, suffix string) string {
	dir := "links"
	if nodeHooks[suffix] {
		dir = "node"
	}
	// bpffs refuses names with a dot.
	return filepath.Join(d.pinDir, dir, ifname+"_"+suffix)
}

// Attach gives a host veth the programs of mode. New hooks are attached
// before the old mode's are removed, so a mode switch never leaves the
// device without a program. An existing pinned link on the same device gets
// the current program swapped in atomically; a pin left from an earlier
// device of that name is replaced.
func (d *BPF) Attach(ifname string, ifindex int, mode model.Mode) error {
	want := hooksFor(mode)
	// Native and generic XDP cannot be on one device at once: drop the
	// other XDP flavour first (packets meanwhile take the tc or kernel path).
	for _, h := range allHooks {
		if h.kind == "xdp" && !hasHook(want, h) {
			if err := d.detachHook(ifname, h); err != nil {
				return err
			}
		}
	}
	for _, h := range want {
		if err := d.attachHook(ifname, ifindex, h); err != nil {
			return err
		}
	}
	for _, h := range allHooks {
		if !hasHook(want, h) {
			if err := d.detachHook(ifname, h); err != nil {
				return err
			}
		}
	}
	idx := uint32(ifindex)
	if mode.XDP() {
		if err := d.objs.Devmap().Put(&idx, &idx); err != nil {
			return fmt.Errorf("add %s to devmap: %w", ifname, err)
		}
	} else if err := d.objs.Devmap().Delete(&idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("remove %s from devmap: %w", ifname, err)
	}
	return nil
}

func (d *BPF) attachHook(ifname string, ifindex int, h hook) error {
	pin := d.linkPin(ifname, h.suffix)
	prog := h.prog(d.objs)
	if h.kind == "tcx" && d.legacyTC {
		return d.attachClsact(ifname, ifindex, h, prog, pin)
	}
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		if linkIfindex(l) == ifindex {
			err := l.Update(prog)
			l.Close()
			if err != nil {
				return fmt.Errorf("update %s program on %s: %w", h.suffix, ifname, err)
			}
			return nil
		}
		l.Unpin()
		l.Close()
	}
	var (
		l   link.Link
		err error
	)
	if h.kind == "xdp" {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: h.flags})
	} else {
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: h.attach})
		if errors.Is(err, ebpf.ErrNotSupported) {
			return ErrNoTCX
		}
	}
	if err != nil {
		return fmt.Errorf("attach %s %s to %s: %w", h.kind, h.suffix, ifname, err)
	}
	err = l.Pin(pin)
	l.Close()
	if err != nil {
		return fmt.Errorf("pin %s %s link of %s: %w", h.kind, h.suffix, ifname, err)
	}
	return nil
}

func linkIfindex(l link.Link) int {
	info, err := l.Info()
	if err != nil {
		return -1
	}
	if t := info.TCX(); t != nil {
		return int(t.Ifindex)
	}
	if x := info.XDP(); x != nil {
		return int(x.Ifindex)
	}
	return -1
}

func (d *BPF) detachHook(ifname string, h hook) error {
	pin := d.linkPin(ifname, h.suffix)
	if h.kind == "tcx" && d.legacyTC {
		return d.detachClsact(ifname, h, pin)
	}
	l, err := link.LoadPinnedLink(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		// Not loadable as a link: still never leave the pin behind.
		if rerr := os.Remove(pin); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("remove pin %s: %w", pin, rerr)
		}
		return nil
	}
	uerr := l.Unpin()
	l.Close()
	if uerr != nil {
		return fmt.Errorf("unpin %s: %w", pin, uerr)
	}
	return nil
}

// Detach removes every program from a host veth and the device from the
// devmap. Missing links are fine.
func (d *BPF) Detach(ifname string, ifindex int) error {
	for _, h := range allHooks {
		if err := d.detachHook(ifname, h); err != nil {
			return err
		}
	}
	if ifindex > 0 {
		idx := uint32(ifindex)
		if err := d.objs.Devmap().Delete(&idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove %s from devmap: %w", ifname, err)
		}
	}
	return nil
}

// Hooks lists the hooks pinned for a host veth, by pin suffix.
func (d *BPF) Hooks(ifname string) []string {
	var out []string
	for _, h := range allHooks {
		if _, err := os.Stat(d.linkPin(ifname, h.suffix)); err == nil {
			kind := h.kind
			if kind == "tcx" && d.legacyTC {
				kind = "tc" // cls_bpf on clsact
			}
			out = append(out, kind+"/"+h.suffix)
		}
	}
	return out
}

// PutNeigh records the MAC of a next hop on ifindex for the XDP datapath.
func (d *BPF) PutNeigh(addr netip.Addr, ifindex int, mac net.HardwareAddr) error {
	k := bpf.NeighKey{Addr: addr.As16(), Ifindex: uint32(ifindex)}
	var v bpf.NeighVal
	copy(v.Mac[:], mac)
	return d.objs.Neigh().Put(&k, &v)
}

// DeleteNeigh forgets a next hop. Missing is fine.
func (d *BPF) DeleteNeigh(addr netip.Addr, ifindex int) error {
	k := bpf.NeighKey{Addr: addr.As16(), Ifindex: uint32(ifindex)}
	if err := d.objs.Neigh().Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// PutDevice lets XDP programs redirect to ifindex (the uplink).
func (d *BPF) PutDevice(ifindex int) error {
	idx := uint32(ifindex)
	return d.objs.Devmap().Put(&idx, &idx)
}

// AttachedDevices lists the host veths that have pinned links.
func (d *BPF) AttachedDevices() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(d.pinDir, "links"))
	if err != nil {
		return nil, fmt.Errorf("list link pins: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		name, _, _ := strings.Cut(e.Name(), "_")
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// CounterKey names one counter: the reason and direction of bpf/lib/abi.h.
type CounterKey struct {
	Reason bpf.Reason
	Dir    bpf.Dir
	Hook   bpf.Hook // the attach point whose program decided
}

// Counters sums the per-CPU metrics of one host ifindex, or of all when
// ifindex is 0.
func (d *BPF) Counters(ifindex int) (map[CounterKey]model.Counter, error) {
	out := map[CounterKey]model.Counter{}
	var (
		k    bpf.MetricsKey
		vals []bpf.MetricsVal
	)
	it := d.objs.Metrics().Iterate()
	for it.Next(&k, &vals) {
		if ifindex != 0 && int(k.Ifindex) != ifindex {
			continue
		}
		ck := CounterKey{Reason: bpf.Reason(k.Reason), Dir: bpf.Dir(k.Dir), Hook: bpf.Hook(k.Hook)}
		c := out[ck]
		for _, v := range vals {
			c.Add(model.Counter{Packets: v.Packets, Bytes: v.Bytes})
		}
		out[ck] = c
	}
	if err := it.Err(); err != nil {
		return out, err
	}
	err := d.uplinkCounters(func(dev int, ck CounterKey, c model.Counter) {
		if ifindex == 0 || dev == ifindex {
			o := out[ck]
			o.Add(c)
			out[ck] = o
		}
	})
	return out, err
}

// uplinkCounters calls fn with the counts of xlane_metrics_uplink (the
// uplink program's ingress counts by reason, per CPU, each slot for the
// device it names), which the hash's readers add to its own.
func (d *BPF) uplinkCounters(fn func(ifindex int, ck CounterKey, c model.Counter)) error {
	m := d.objs.MetricsUplink()
	if m == nil {
		return nil
	}
	var (
		k    uint32
		vals []bpf.MetricsDevVal
	)
	it := m.Iterate()
	for it.Next(&k, &vals) {
		for _, v := range vals {
			if v.Ifindex != 0 && (v.Packets != 0 || v.Bytes != 0) {
				fn(int(v.Ifindex), CounterKey{Reason: bpf.Reason(k), Dir: bpf.DirIngress, Hook: bpf.HookXDP},
					model.Counter{Packets: v.Packets, Bytes: v.Bytes})
			}
		}
	}
	return it.Err()
}

// SetUplinkCounters gives xlane_metrics_uplink to the uplink ifindex (0:
// to none, the uplink program then counts in the hash). Counts of the
// device the slots had are kept when it is the same, else zeroed (as
// PruneCounters would remove them from the hash).
func (d *BPF) SetUplinkCounters(ifindex int) error {
	m := d.objs.MetricsUplink()
	if m == nil {
		return nil
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	for r := uint32(0); r < m.MaxEntries(); r++ {
		var cur []bpf.MetricsDevVal
		if err := m.Lookup(r, &cur); err != nil {
			return fmt.Errorf("uplink counters: read reason %d: %w", r, err)
		}
		vals := make([]bpf.MetricsDevVal, ncpu)
		same := len(cur) == ncpu
		for i := range cur {
			same = same && int(cur[i].Ifindex) == ifindex
		}
		if same {
			continue
		}
		for i := range vals {
			vals[i].Ifindex = uint32(ifindex)
		}
		if err := m.Put(r, vals); err != nil {
			return fmt.Errorf("uplink counters: set reason %d to ifindex %d: %w", r, ifindex, err)
		}
	}
	return nil
}

// CountersByIfindex sums the per-CPU metrics of every device at once (one
// walk of xlane_metrics), by ifindex: 0 for counts of no device
// (pass_ct_full from the XDP programs).
func (d *BPF) CountersByIfindex() (map[int]map[CounterKey]model.Counter, error) {
	out := map[int]map[CounterKey]model.Counter{}
	var (
		k    bpf.MetricsKey
		vals []bpf.MetricsVal
	)
	it := d.objs.Metrics().Iterate()
	for it.Next(&k, &vals) {
		dev := out[int(k.Ifindex)]
		if dev == nil {
			dev = map[CounterKey]model.Counter{}
			out[int(k.Ifindex)] = dev
		}
		ck := CounterKey{Reason: bpf.Reason(k.Reason), Dir: bpf.Dir(k.Dir), Hook: bpf.Hook(k.Hook)}
		c := dev[ck]
		for _, v := range vals {
			c.Add(model.Counter{Packets: v.Packets, Bytes: v.Bytes})
		}
		dev[ck] = c
	}
	if err := it.Err(); err != nil {
		return out, err
	}
	err := d.uplinkCounters(func(ifindex int, ck CounterKey, c model.Counter) {
		dev := out[ifindex]
		if dev == nil {
			dev = map[CounterKey]model.Counter{}
			out[ifindex] = dev
		}
		o := dev[ck]
		o.Add(c)
		dev[ck] = o
	})
	return out, err
}

// PruneCounters deletes the counters of every ifindex not in keep.
func (d *BPF) PruneCounters(keep map[int]bool) error {
	var (
		k    bpf.MetricsKey
		vals []bpf.MetricsVal
		del  []bpf.MetricsKey
	)
	it := d.objs.Metrics().Iterate()
	for it.Next(&k, &vals) {
		if !keep[int(k.Ifindex)] {
			del = append(del, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate metrics: %w", err)
	}
	for i := range del {
		if err := d.objs.Metrics().Delete(&del[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete metrics: %w", err)
		}
	}
	// The uplink's array: zeroed, for no device, when its device goes.
	gone := false
	if err := d.uplinkCounters(func(ifindex int, _ CounterKey, _ model.Counter) {
		gone = gone || !keep[ifindex]
	}); err != nil {
		return fmt.Errorf("read uplink counters: %w", err)
	}
	if gone {
		return d.SetUplinkCounters(0)
	}
	return nil
}

// RemovePins deletes the whole pin directory of this instance: maps and
// links. Used by uninstall; the caller must have detached and closed first.
func RemovePins(pinDir string) error {
	if err := os.RemoveAll(pinDir); err != nil {
		return fmt.Errorf("remove pins %s: %w", pinDir, err)
	}
	return nil
}

// FlushNeigh empties xlane_neigh (before a fresh dump refills it).
func (d *BPF) FlushNeigh() error {
	var (
		k    bpf.NeighKey
		v    bpf.NeighVal
		keys []bpf.NeighKey
	)
	it := d.objs.Neigh().Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for i := range keys {
		if err := d.objs.Neigh().Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// ErrForeignXDP: the uplink already runs an XDP program xlane did not attach.
var ErrForeignXDP = errors.New("uplink already has an XDP program that xlane did not attach")

const uplinkSuffix = "uplink"

// XDP attach modes of the uplink program (xlaned --uplink-xdp-mode).
const (
	XDPModeAuto    = "auto"    // native, generic where the driver has no native XDP or is veth (AutoXDPMode)
	XDPModeNative  = "native"  // in the driver (XDP_FLAGS_DRV_MODE)
	XDPModeGeneric = "generic" // in the stack, any device (XDP_FLAGS_SKB_MODE)
	XDPModeOffload = "offload" // on the NIC (XDP_FLAGS_HW_MODE)
)

// XDPModes lists the valid --uplink-xdp-mode values.
var XDPModes = []string{XDPModeAuto, XDPModeNative, XDPModeGeneric, XDPModeOffload}

// AutoXDPMode is the attach mode --uplink-xdp-mode auto starts from for a
// link of type linkType (netlink's: "veth", "device", ...): generic on a
// veth, auto (native, generic if the driver refuses) on anything else.
// Native XDP on a veth costs every TCP flow through it: the kernel
// (veth_fix_features) takes GSO/TSO away from the veth's peer while this
// end has a native program, so whatever the peer's side sends (a bridge
// port, the host end of a container's eth0) is segmented in software into
// MTU-sized frames, each crossing the veth, the UDP stack and the VXLAN
// device on its own. Measured (docs/multinode.md): pod to pod over the
// overlay on veth uplinks 1.3-1.6 Gbit/s native vs 6.2-6.5 generic.
func AutoXDPMode(linkType string) string {
	if linkType == "veth" {
		return XDPModeGeneric
	}
	return XDPModeAuto
}

// ErrXDPModeUnsupported: the uplink's driver cannot run xlane's program in
// the attach mode asked for.
var ErrXDPModeUnsupported = errors.New("XDP attach mode not supported")

// CheckUplinkXDPMode validates mode for the device ifname before anything
// is attached. Offload is refused here: xlane's uplink program uses
// map-in-map, bpf_loop and helpers that no NIC offload (nfp, netdevsim)
// implements, and the program would have to be loaded for the device.
func CheckUplinkXDPMode(ifname, mode string) error {
	switch mode {
	case "", XDPModeAuto, XDPModeNative, XDPModeGeneric:
		return nil
	case XDPModeOffload:
		return fmt.Errorf("uplink %s: XDP mode %s: %w by driver %s (xlane's uplink program uses map-in-map, bpf_loop and helpers that NIC offload does not support; use --uplink-xdp-mode native or generic)",
			ifname, mode, ErrXDPModeUnsupported, DriverName(ifname))
	}
	return fmt.Errorf("--uplink-xdp-mode %q: want one of %s", mode, strings.Join(XDPModes, ", "))
}

// DriverName is the kernel driver of ifname ("unknown" if it cannot be
// read), as ethtool -i names it.
func DriverName(ifname string) string {
	if p, err := os.Readlink(filepath.Join("/sys/class/net", ifname, "device", "driver")); err == nil {
		return filepath.Base(p)
	}
	if l, err := netlink.LinkByName(ifname); err == nil {
		return l.Type() // virtual devices have no device/driver link: veth, dummy, ...
	}
	return "unknown"
}

// XDPAttachMode names the attach mode of the XDP program on ifindex:
// native, generic, offload, or "" when none is attached.
func XDPAttachMode(ifindex int) string {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
		return ""
	}
	switch l.Attrs().Xdp.AttachMode {
	case nl.XDP_ATTACHED_DRV:
		return XDPModeNative
	case nl.XDP_ATTACHED_SKB:
		return XDPModeGeneric
	case nl.XDP_ATTACHED_HW:
		return XDPModeOffload
	}
	return "multiple"
}

// uplinkProg is the uplink program for an attach mode: generic XDP needs
// the one without frags (xdp_uplink.c says why).
func (d *BPF) uplinkProg(mode string) *ebpf.Program {
	if mode == XDPModeGeneric {
		return d.objs.XDPGenericFromUplink()
	}
	return d.objs.XDPFromUplink()
}

// AttachUplink puts the uplink program on the node's uplink in XDP attach
// mode (XDPMode*: auto is native, else generic) and lets the endpoint
// programs redirect to it; it returns the mode attached. It adopts its own
// pinned link when that runs in the mode asked for (auto: either); a
// program someone else attached is refused unless takeover, in which case a
// netlink-attached one is removed first (a bpf_link owned by another
// process cannot be, and is reported).
func (d *BPF) AttachUplink(ifname string, ifindex int, foreignProgID uint32, takeover bool, mode string) (string, error) {
	if err := CheckUplinkXDPMode(ifname, mode); err != nil {
		return "", err
	}
	if mode == "" {
		mode = XDPModeAuto
	}
	if mode == XDPModeAuto {
		if l, err := netlink.LinkByIndex(ifindex); err == nil {
			mode = AutoXDPMode(l.Type())
		}
	}
	pin := d.linkPin(ifname, uplinkSuffix)
	var replaced string // the mode of our own link replaced here, restored on failure
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		cur := XDPAttachMode(ifindex)
		if linkIfindex(l) == ifindex && (cur == mode || mode == XDPModeAuto) {
			err := l.Update(d.uplinkProg(cur))
			l.Close()
			if err != nil {
				return "", fmt.Errorf("update uplink program on %s: %w", ifname, err)
			}
			if err := d.SetUplinkCounters(ifindex); err != nil {
				return "", err
			}
			return cur, d.PutDevice(ifindex)
		}
		// Another device, or another mode: the mode of a link cannot
		// change, the old link goes first (two modes cannot coexist).
		if linkIfindex(l) == ifindex {
			replaced = cur
		}
		l.Unpin()
		l.Close()
	}
	if foreignProgID != 0 {
		if !takeover {
			return "", fmt.Errorf("%s (program id %d): %w; refusing to replace it (start xlaned with --uplink-takeover to take it over)", ifname, foreignProgID, ErrForeignXDP)
		}
		if err := netlinkDetachXDP(ifindex); err != nil {
			return "", fmt.Errorf("take over XDP on %s (program id %d): %w", ifname, foreignProgID, err)
		}
	}
	attach := func(flags link.XDPAttachFlags) (link.Link, error) {
		prog := d.objs.XDPFromUplink()
		if flags == link.XDPGenericMode {
			prog = d.objs.XDPGenericFromUplink()
		}
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	}
	var (
		l   link.Link
		err error
	)
	switch mode {
	case XDPModeGeneric:
		l, err = attach(link.XDPGenericMode)
	case XDPModeNative:
		l, err = attach(link.XDPDriverMode)
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("%w by driver %s: %w", ErrXDPModeUnsupported, DriverName(ifname), err)
		}
	default: // auto
		mode = XDPModeNative
		if l, err = attach(link.XDPDriverMode); err != nil {
			mode = XDPModeGeneric
			l, err = attach(link.XDPGenericMode)
		}
	}
	if err != nil {
		err = fmt.Errorf("attach XDP (%s mode) to uplink %s: %w", mode, ifname, err)
		if replaced == XDPModeNative || replaced == XDPModeGeneric {
			// Put the previous mode back rather than leave the uplink bare.
			flags := map[string]link.XDPAttachFlags{XDPModeNative: link.XDPDriverMode, XDPModeGeneric: link.XDPGenericMode}[replaced]
			if old, aerr := attach(flags); aerr == nil {
				if perr := old.Pin(pin); perr != nil {
					old.Close()
				} else {
					old.Close()
					err = fmt.Errorf("%w (the %s attachment is kept)", err, replaced)
				}
			}
		}
		return "", err
	}
	err = l.Pin(pin)
	if err != nil {
		l.Close() // not pinned: closing detaches it, nothing stays behind
		return "", fmt.Errorf("pin uplink link of %s: %w", ifname, err)
	}
	l.Close()
	if err := d.SetUplinkCounters(ifindex); err != nil {
		return "", err
	}
	return mode, d.PutDevice(ifindex)
}

// DetachUplink removes the uplink program (missing is fine).
func (d *BPF) DetachUplink(ifname string, ifindex int) error {
	if err := d.detachHook(ifname, hook{suffix: uplinkSuffix}); err != nil {
		return err
	}
	idx := uint32(ifindex)
	if err := d.objs.Devmap().Delete(&idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// OwnsXDP reports whether the XDP program on ifname is xlane's (pinned).
func (d *BPF) OwnsXDP(ifname string) bool {
	for _, s := range []string{uplinkSuffix, hookXDP.suffix, hookXDPGeneric.suffix} {
		if _, err := os.Stat(d.linkPin(ifname, s)); err == nil {
			return true
		}
	}
	return false
}
