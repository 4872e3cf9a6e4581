package bpf

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/features"
)

// requireXDPPrograms skips an XDP test on a kernel whose verifier refuses
// the XDP programs, unless the kernel matrix says this
// kernel runs the XDP modes (XLANE_REQUIRE_MODES): then it fails.
func requireXDPPrograms(tb testing.TB, objs *Objects) {
	tb.Helper()
	var err error
	if objs.XDPErr() != nil {
		err = errors.New(VerifierSummary(objs.XDPErr()))
	}
	features.RequireMode(tb, "xdp", err)
}

// attachTC attaches prog to dev's ingress as the tc datapath does on this
// kernel: a tcx link, or a cls_bpf filter on clsact where there is no tcx.
func (h *harness) attachTC(tb testing.TB, dev string, prog *ebpf.Program) {
	tb.Helper()
	var l link.Link
	err := h.do(func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Interface: h.links[dev], Program: prog, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err == nil {
		tb.Cleanup(func() { l.Close() })
		return
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		tb.Fatalf("attach to %s: %v", dev, err)
	}
	nl, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer nl.Close()
	idx := h.links[dev]
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := nl.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		tb.Fatalf("add clsact to %s: %v", dev, err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL},
		Fd:          prog.FD(), Name: "xlane_test", DirectAction: true,
	}
	if err := nl.FilterAdd(f); err != nil {
		tb.Fatalf("attach cls_bpf to %s (no tcx here): %v", dev, err)
	}
	tb.Cleanup(func() { nl2, _ := netlink.NewHandleAt(h.ns); nl2.FilterDel(f); nl2.Close() })
}
