package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// AF_XDP VM ports: the port end of a VM endpoint's veth pair carries
// bpf/xdp_vmport.c (native XDP), which puts every frame into QEMU's AF_XDP
// socket of its queue. Each port has its own socket map; both are pinned
// under pinDir/vmports/: PORT_xsks (the map QEMU opens with map-path=) and
// PORT_xdp (the link), so the port works on while xlaned is down and a
// restarted daemon adopts them.

const vmportDir = "vmports"

func (d *BPF) vmportPin(ifname, what string) string {
	return filepath.Join(d.pinDir, vmportDir, ifname+"_"+what)
}

// AttachVMPort gives an AF_XDP port device its program and socket map and
// returns the map's pin, for QEMU's map-path=. A port whose pinned link is
// on this very device keeps its map (QEMU's sockets are in it) and gets
// this binary's program swapped in; anything else pinned under the name
// (a device of that name that was deleted) is replaced.
func (d *BPF) AttachVMPort(ifname string, ifindex int) (string, error) {
	if err := os.MkdirAll(filepath.Join(d.pinDir, vmportDir), 0o700); err != nil {
		return "", fmt.Errorf("create vm port pin dir: %w", err)
	}
	mpin, lpin := d.vmportPin(ifname, "xsks"), d.vmportPin(ifname, "xdp")
	var old link.Link
	if l, err := link.LoadPinnedLink(lpin, nil); err == nil {
		if linkIfindex(l) == ifindex {
			old = l
			defer old.Close()
		} else {
			l.Unpin()
			l.Close()
		}
	}
	var xsks *ebpf.Map
	if old != nil {
		xsks, _ = ebpf.LoadPinnedMap(mpin, nil)
	}
	if xsks == nil {
		if err := os.Remove(mpin); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("remove stale pin %s: %w", mpin, err)
		}
		m, err := bpf.NewXSKMap()
		if err != nil {
			return "", err
		}
		if err := m.Pin(mpin); err != nil {
			m.Close()
			return "", fmt.Errorf("pin socket map of %s: %w", ifname, err)
		}
		xsks = m
	}
	defer xsks.Close()
	prog, err := d.objs.LoadVMPort(xsks)
	if err != nil {
		return "", err
	}
	defer prog.Close()
	if old != nil {
		if err := old.Update(prog); err != nil {
			return "", fmt.Errorf("update vm port program on %s: %w", ifname, err)
		}
		return mpin, nil
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		return "", fmt.Errorf("attach vm port program to %s: %w", ifname, err)
	}
	err = l.Pin(lpin)
	l.Close() // unpinned, closing detaches it
	if err != nil {
		return "", fmt.Errorf("pin vm port link of %s: %w", ifname, err)
	}
	return mpin, nil
}

// DetachVMPort removes a port's program and socket map. Missing is fine.
func (d *BPF) DetachVMPort(ifname string) error {
	var errs []error
	for _, what := range []string{"xdp", "xsks"} {
		// Removing the last reference detaches the link and frees the
		// map (QEMU's sockets stay open but receive nothing).
		if err := os.Remove(d.vmportPin(ifname, what)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove vm port pin: %w", err))
		}
	}
	return errors.Join(errs...)
}

// VMPorts lists the port devices that have pins.
func (d *BPF) VMPorts() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(d.pinDir, vmportDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list vm port pins: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		name := e.Name()
		if i := strings.LastIndexByte(name, '_'); i > 0 && !seen[name[:i]] {
			seen[name[:i]] = true
			out = append(out, name[:i])
		}
	}
	return out, nil
}
