package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/bpf"
)

// ProxyRule is one transparent redirect as the programs see it.
type ProxyRule struct {
	Port, ToPort uint16
	Exempt       uint8 // ProxyExemptMark, ...Cgroup, ...UID
	Mark, UID    uint32
	CgroupID     uint64
}

func (d *BPF) proxyObjs() (*bpf.ProxyObjects, error) {
	if d.proxy == nil {
		o, err := bpf.LoadProxy(d.sockDir("maps"))
		if err != nil {
			return nil, err
		}
		d.proxy = o
	}
	return d.proxy, nil
}

func proxyPin(d *BPF, id uint64, hook string) string {
	return d.sockDir("proxy_" + strconv.FormatUint(id, 10) + "_" + hook)
}

// AttachProxy attaches the redirect programs to the cgroup at path
// (idempotent): connect4/6 and sockops for its clients, getsockopt for a
// proxy inside it. All or nothing.
func (d *BPF) AttachProxy(path string) error {
	o, err := d.proxyObjs()
	if err != nil {
		return err
	}
	id, err := CgroupID(path)
	if err != nil {
		return err
	}
	hooks := []struct {
		name string
		at   ebpf.AttachType
		prog *ebpf.Program
	}{
		{"sockops", ebpf.AttachCGroupSockOps, o.Sockops()},
		{"getsockopt", ebpf.AttachCGroupGetsockopt, o.Getsockopt()},
		{"connect4", ebpf.AttachCGroupInet4Connect, o.Connect4()},
		{"connect6", ebpf.AttachCGroupInet6Connect, o.Connect6()},
	}
	for i, h := range hooks {
		if err := attachCgroupPinned(proxyPin(d, id, h.name), path, h.at, h.prog); err != nil {
			for _, u := range hooks[:i] {
				unpinLink(proxyPin(d, id, u.name))
			}
			return err
		}
	}
	return nil
}

// DetachProxy removes the redirect programs from the cgroup with that id
// (missing is fine).
func (d *BPF) DetachProxy(cgroupID uint64) error {
	var errs []error
	// connect first: no new redirect whose original destination the
	// other hooks would no longer track.
	for _, h := range []string{"connect4", "connect6", "sockops", "getsockopt"} {
		errs = append(errs, unpinLink(proxyPin(d, cgroupID, h)))
	}
	return errors.Join(errs...)
}

// ProxyCgroups lists the cgroup ids with pinned redirect programs.
func (d *BPF) ProxyCgroups() ([]uint64, error) {
	ents, err := os.ReadDir(d.sockDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	seen := map[uint64]bool{}
	var ids []uint64
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "proxy_")
		if !ok {
			continue
		}
		idStr, _, _ := strings.Cut(rest, "_")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if err == nil && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// PutProxyRule writes a redirect rule.
func (d *BPF) PutProxyRule(r ProxyRule) error {
	o, err := d.proxyObjs()
	if err != nil {
		return err
	}
	v := bpf.ProxyVal{ToPort: r.ToPort, Exempt: r.Exempt, Mark: r.Mark, Uid: r.UID, Cgroup: r.CgroupID}
	if err := o.Rules().Put(r.Port, &v); err != nil {
		return fmt.Errorf("write redirect of port %d: %w", r.Port, err)
	}
	return nil
}

// DeleteProxyRule removes the rule of port (missing is fine).
func (d *BPF) DeleteProxyRule(port uint16) error {
	o, err := d.proxyObjs()
	if err != nil {
		return err
	}
	if err := o.Rules().Delete(port); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete redirect of port %d: %w", port, err)
	}
	return nil
}

// ProxyRules lists the rules in the map.
func (d *BPF) ProxyRules() (map[uint16]ProxyRule, error) {
	if d.sockUnused("xlane_proxy_rules", d.proxy != nil) {
		return nil, nil
	}
	o, err := d.proxyObjs()
	if err != nil {
		return nil, err
	}
	out := map[uint16]ProxyRule{}
	var p uint16
	var v bpf.ProxyVal
	it := o.Rules().Iterate()
	for it.Next(&p, &v) {
		out[p] = ProxyRule{Port: p, ToPort: v.ToPort, Exempt: v.Exempt, Mark: v.Mark, UID: v.Uid, CgroupID: v.Cgroup}
	}
	return out, it.Err()
}

// ProxyStats are the redirect counters (nil where redirects were never
// used).
func (d *BPF) ProxyStats() (map[string]uint64, error) {
	if d.sockUnused("xlane_proxy_stats", d.proxy != nil) {
		return nil, nil
	}
	o, err := d.proxyObjs()
	if err != nil {
		return nil, err
	}
	return accel.ReadProxyStats(o.Stats())
}

// ---- inbound redirect (--direction in) ----
//
// An sk_lookup program per network namespace (its own copy: the program
// cannot tell which namespace it runs in), its link pinned as
// sock/proxyin_<netns cookie>; the rules in xlane_proxy_in and
// xlane_proxy_in_to, the proxy's listeners in xlane_proxy_listeners; the
// cgroup hooks (AttachProxy) on the proxy's cgroup.

// ProxyInRule is one inbound redirect as the programs see it.
type ProxyInRule struct {
	ProxyRule        // Port: where connections arrive; ToPort: the proxy's listener
	Netns     uint64 // the namespace's cookie
}

func proxyInPin(d *BPF, netns uint64) string {
	return d.sockDir("proxyin_" + strconv.FormatUint(netns, 10))
}

// NetnsCookie is the cookie of the network namespace at path
// (SO_NETNS_COOKIE of a socket made there, Linux 5.14+).
func NetnsCookie(path string) (uint64, error) {
	var cookie uint64
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("network namespace %s: %w", path, err)
	}
	return cookie, nil
}

// AttachProxyIn attaches the inbound redirect's sk_lookup program to the
// network namespace at path, whose cookie is netns (idempotent: a pinned
// link gets the current program).
func (d *BPF) AttachProxyIn(path string, netns uint64) error {
	o, err := d.proxyObjs()
	if err != nil {
		return err
	}
	prog, err := bpf.LoadProxyLookup(d.sockDir("maps"), o, netns)
	if err != nil {
		return err
	}
	defer prog.Close()
	pin := proxyInPin(d, netns)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		err := l.Update(prog)
		l.Close()
		if err == nil {
			return nil
		}
		unpinLink(pin)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer f.Close()
	l, err := link.AttachNetNs(int(f.Fd()), prog)
	if err != nil {
		return fmt.Errorf("attach sk_lookup to network namespace %s: %w", path, err)
	}
	defer l.Close()
	if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
		return err
	}
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("pin %s: %w", pin, err)
	}
	return nil
}

// DetachProxyIn removes the sk_lookup program of the namespace with that
// cookie (missing is fine).
func (d *BPF) DetachProxyIn(netns uint64) error { return unpinLink(proxyInPin(d, netns)) }

// ProxyInNetns lists the namespace cookies with a pinned sk_lookup link.
func (d *BPF) ProxyInNetns() ([]uint64, error) {
	ents, err := os.ReadDir(d.sockDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range ents {
		if s, ok := strings.CutPrefix(e.Name(), "proxyin_"); ok {
			if id, err := strconv.ParseUint(s, 10, 64); err == nil {
				out = append(out, id)
			}
		}
	}
	return out, nil
}

// PutProxyInRule writes an inbound rule: the redirected port, and the
// proxy's port for sockops to recognise its listen().
func (d *BPF) PutProxyInRule(r ProxyInRule) error {
	o, err := d.proxyObjs()
	if err != nil {
		return err
	}
	v := bpf.ProxyVal{ToPort: r.ToPort, Exempt: r.Exempt, Mark: r.Mark, Uid: r.UID, Cgroup: r.CgroupID}
	if err := o.InTo().Put(bpf.ProxyInKey{Netns: r.Netns, Port: r.ToPort}, r.Port); err != nil {
		return fmt.Errorf("write the proxy port %d of the inbound redirect of port %d: %w", r.ToPort, r.Port, err)
	}
	if err := o.In().Put(bpf.ProxyInKey{Netns: r.Netns, Port: r.Port}, &v); err != nil {
		o.InTo().Delete(bpf.ProxyInKey{Netns: r.Netns, Port: r.ToPort})
		return fmt.Errorf("write inbound redirect of port %d: %w", r.Port, err)
	}
	return nil
}

// DeleteProxyInRule removes an inbound rule and the proxy's listeners
// from the maps (missing is fine; the proxy's sockets stay open).
func (d *BPF) DeleteProxyInRule(r ProxyInRule) error {
	o, err := d.proxyObjs()
	if err != nil {
		return err
	}
	var errs []error
	del := func(m *ebpf.Map, k any) {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete inbound redirect of port %d: %w", r.Port, err))
		}
	}
	del(o.In(), bpf.ProxyInKey{Netns: r.Netns, Port: r.Port})
	del(o.InTo(), bpf.ProxyInKey{Netns: r.Netns, Port: r.ToPort})
	for _, fam := range []uint8{4, 6} {
		del(o.Listeners(), bpf.ProxyLsnKey{Netns: r.Netns, Port: r.ToPort, Family: fam})
	}
	return errors.Join(errs...)
}

// ProxyInRules lists the inbound rules in the map.
func (d *BPF) ProxyInRules() ([]ProxyInRule, error) {
	if d.sockUnused("xlane_proxy_in", d.proxy != nil) {
		return nil, nil
	}
	o, err := d.proxyObjs()
	if err != nil {
		return nil, err
	}
	var out []ProxyInRule
	var k bpf.ProxyInKey
	var v bpf.ProxyVal
	it := o.In().Iterate()
	for it.Next(&k, &v) {
		out = append(out, ProxyInRule{Netns: k.Netns, ProxyRule: ProxyRule{Port: k.Port, ToPort: v.ToPort,
			Exempt: v.Exempt, Mark: v.Mark, UID: v.Uid, CgroupID: v.Cgroup}})
	}
	return out, it.Err()
}

// PutProxyListener puts the proxy's listening socket fd (a copy this
// process holds) into the listener map for its family (4 or 6).
func (d *BPF) PutProxyListener(netns uint64, port uint16, family uint8, fd int) error {
	o, err := d.proxyObjs()
	if err != nil {
		return err
	}
	if err := o.Listeners().Put(bpf.ProxyLsnKey{Netns: netns, Port: port, Family: family}, uint64(fd)); err != nil {
		return fmt.Errorf("put the proxy's listener on port %d into the socket map: %w", port, err)
	}
	return nil
}

// ProxyListener says whether the listener map holds a socket for the
// proxy's port and family.
func (d *BPF) ProxyListener(netns uint64, port uint16, family uint8) bool {
	o, err := d.proxyObjs()
	if err != nil {
		return false
	}
	var cookie uint64
	return o.Listeners().Lookup(bpf.ProxyLsnKey{Netns: netns, Port: port, Family: family}, &cookie) == nil
}
