package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// ErrNoTCX is returned where the kernel lacks tcx (Linux < 6.6).
var ErrNoTCX = errors.New("tc mode needs tcx links (Linux 6.6 or later)")

// BPF is the tc datapath of one daemon instance.
type BPF struct {
	pinDir string
	objs   *bpf.Objects
}

// Open loads the programs and adopts (or creates) the maps pinned under
// pinDir/maps.
func Open(pinDir string) (*BPF, error) {
	if err := ensureBPFFS(pinDir); err != nil {
		return nil, err
	}
	objs, err := bpf.Load(filepath.Join(pinDir, "maps"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(pinDir, "links"), 0o700); err != nil {
		objs.Close()
		return nil, fmt.Errorf("create link pin dir: %w", err)
	}
	return &BPF{pinDir: pinDir, objs: objs}, nil
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
func (d *BPF) Close() error { return d.objs.Close() }

type hook struct {
	suffix string
	attach ebpf.AttachType
	prog   func(*bpf.Objects) *ebpf.Program
}

var hooks = []hook{
	{"ingress", ebpf.AttachTCXIngress, (*bpf.Objects).FromEndpoint},
	{"egress", ebpf.AttachTCXEgress, (*bpf.Objects).ToEndpoint},
}

func (d *BPF) linkPin(ifname, suffix string) string {
	// bpffs refuses names with a dot.
	return filepath.Join(d.pinDir, "links", ifname+"_"+suffix)
}

// Attach attaches the tc programs to a host veth. An existing pinned link
// on the same device gets the current program swapped in atomically; a pin
// left from an earlier device of that name is replaced.
func (d *BPF) Attach(ifname string, ifindex int) error {
	for _, h := range hooks {
		pin := d.linkPin(ifname, h.suffix)
		prog := h.prog(d.objs)
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			info, ierr := l.Info()
			if ierr == nil && info.TCX() != nil && int(info.TCX().Ifindex) == ifindex {
				err := l.Update(prog)
				l.Close()
				if err != nil {
					return fmt.Errorf("update %s program on %s: %w", h.suffix, ifname, err)
				}
				continue
			}
			l.Unpin()
			l.Close()
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: h.attach})
		if errors.Is(err, ebpf.ErrNotSupported) {
			return ErrNoTCX
		}
		if err != nil {
			return fmt.Errorf("attach tcx %s to %s: %w", h.suffix, ifname, err)
		}
		err = l.Pin(pin)
		l.Close()
		if err != nil {
			return fmt.Errorf("pin tcx %s link of %s: %w", h.suffix, ifname, err)
		}
	}
	return nil
}

// Detach removes the programs from a host veth. Missing links are fine.
func (d *BPF) Detach(ifname string) error {
	for _, h := range hooks {
		pin := d.linkPin(ifname, h.suffix)
		l, err := link.LoadPinnedLink(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			// Not loadable as a link: still never leave the pin behind.
			if rerr := os.Remove(pin); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				return fmt.Errorf("remove pin %s: %w", pin, rerr)
			}
			continue
		}
		uerr := l.Unpin()
		l.Close()
		if uerr != nil {
			return fmt.Errorf("unpin %s: %w", pin, uerr)
		}
	}
	return nil
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

// PutEndpoint maps addr to the host veth that reaches it.
func (d *BPF) PutEndpoint(addr netip.Addr, v bpf.EndpointVal) error {
	k := bpf.KeyFromAddr(addr)
	if err := d.objs.Endpoints().Put(&k, &v); err != nil {
		return fmt.Errorf("put endpoint %s: %w", addr, err)
	}
	return nil
}

// DeleteEndpoint removes addr. Missing is fine.
func (d *BPF) DeleteEndpoint(addr netip.Addr) error {
	k := bpf.KeyFromAddr(addr)
	if err := d.objs.Endpoints().Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete endpoint %s: %w", addr, err)
	}
	return nil
}

// EndpointAddrs lists the addresses in the endpoint map.
func (d *BPF) EndpointAddrs() ([]netip.Addr, error) {
	var (
		k   bpf.EndpointKey
		v   bpf.EndpointVal
		out []netip.Addr
	)
	it := d.objs.Endpoints().Iterate()
	for it.Next(&k, &v) {
		out = append(out, bpf.AddrFromKey(k))
	}
	return out, it.Err()
}

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Add adds o to c.
func (c *Counter) Add(o Counter) { c.Packets += o.Packets; c.Bytes += o.Bytes }

// CounterKey names one counter: the reason and direction of bpf/lib/abi.h.
type CounterKey struct {
	Reason bpf.Reason
	Dir    bpf.Dir
}

// Counters sums the per-CPU metrics of one host ifindex, or of all when
// ifindex is 0.
func (d *BPF) Counters(ifindex int) (map[CounterKey]Counter, error) {
	out := map[CounterKey]Counter{}
	var (
		k    bpf.MetricsKey
		vals []bpf.MetricsVal
	)
	it := d.objs.Metrics().Iterate()
	for it.Next(&k, &vals) {
		if ifindex != 0 && int(k.Ifindex) != ifindex {
			continue
		}
		ck := CounterKey{Reason: bpf.Reason(k.Reason), Dir: bpf.Dir(k.Dir)}
		c := out[ck]
		for _, v := range vals {
			c.Add(Counter{Packets: v.Packets, Bytes: v.Bytes})
		}
		out[ck] = c
	}
	return out, it.Err()
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
