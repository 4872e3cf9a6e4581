package datapath

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// Legacy tc (kernels without tcx: the 6.1 leg; forced here on any kernel)
// pins each device's program on its own path. Every device's filter runs
// the same *ebpf.Program, and Program.Pin of an already pinned program
// moves its pin (or does nothing when the path is the one it has), so
// before, only the device attached last kept its pins: a reconcile found
// the others' programs missing ("endpoint good has no programs after
// reconcile" on 6.1), and re-attaching a device whose pin the program
// last had pinned nothing at all.
func TestLegacyTCPinsPerDevice(t *testing.T) {
	d := openTest(t, "legacytc")
	if err := d.UseLegacyTC(true); err != nil {
		t.Fatal(err)
	}
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	want := []string{"tc/ingress", "tc/egress"}
	err = node.Do(func(ns.NetNS) error {
		devs := map[string]int{}
		for _, name := range []string{"xlh-lega", "xlh-legb"} {
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
			if err := netlink.LinkAdd(v); err != nil {
				return err
			}
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			devs[name] = l.Attrs().Index
		}
		check := func(when string, names ...string) error {
			for _, name := range names {
				if got := d.Hooks(name); !slices.Equal(got, want) {
					return fmt.Errorf("%s: %s has hooks %v, want %v", when, name, got, want)
				}
				if err := filterIsPinned(name, devs[name], d.linkPin(name, hookTCIngress.suffix)); err != nil {
					return fmt.Errorf("%s: %w", when, err)
				}
			}
			return nil
		}
		for _, name := range []string{"xlh-lega", "xlh-legb"} {
			if err := d.Attach(name, devs[name], model.ModeTC); err != nil {
				return err
			}
		}
		if err := check("both attached", "xlh-lega", "xlh-legb"); err != nil {
			return err
		}
		// What the reconcile test does: both lose their programs, then
		// each is attached again (the last one attached first).
		for _, name := range []string{"xlh-lega", "xlh-legb"} {
			if err := d.Detach(name, devs[name]); err != nil {
				return err
			}
			if got := d.Hooks(name); len(got) != 0 {
				return fmt.Errorf("%s after detach: hooks %v", name, got)
			}
		}
		for _, name := range []string{"xlh-legb", "xlh-lega"} {
			if err := d.Attach(name, devs[name], model.ModeTC); err != nil {
				return err
			}
		}
		if err := check("attached again", "xlh-lega", "xlh-legb"); err != nil {
			return err
		}
		// Detaching one leaves the other's filter and pins.
		if err := d.Detach("xlh-lega", devs["xlh-lega"]); err != nil {
			return err
		}
		return check("after the other's detach", "xlh-legb")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// filterIsPinned checks that ifindex's ingress has xlane's cls_bpf filter
// and that pin holds the program it runs.
func filterIsPinned(name string, ifindex int, pin string) error {
	fs, err := netlink.FilterList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return err
	}
	var id uint32
	for _, f := range fs {
		if b, ok := f.(*netlink.BpfFilter); ok && b.Handle == legacyHandle {
			id = uint32(b.Id)
		}
	}
	if id == 0 {
		return fmt.Errorf("%s: no xlane filter at ingress (%d filters)", name, len(fs))
	}
	p, err := ebpf.LoadPinnedProgram(pin, nil)
	if err != nil {
		return fmt.Errorf("%s: pin %s: %w", name, pin, err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return err
	}
	if pid, _ := info.ID(); uint32(pid) != id {
		return fmt.Errorf("%s: pin %s holds program %d, the filter runs %d", name, pin, pid, id)
	}
	return nil
}
