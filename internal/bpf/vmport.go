package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// xsksMap is the ELF name of an AF_XDP port's socket map (bpf/lib/xsk.h).
const xsksMap = "xlane_xsks"

// NewXSKMap creates an empty socket map for one AF_XDP VM port, unpinned:
// the caller pins it where QEMU finds it (map-path=).
func NewXSKMap() (*ebpf.Map, error) {
	spec, err := loadVmport()
	if err != nil {
		return nil, err
	}
	ms := spec.Maps[xsksMap].Copy()
	ms.Pinning = ebpf.PinNone
	m, err := ebpf.NewMap(ms)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", xsksMap, err)
	}
	return m, nil
}

// LoadVMPort loads the program of an AF_XDP VM port (bpf/xdp_vmport.c) on
// the maps of o, with xsks (from NewXSKMap, or adopted from its pin) as
// its socket map. The caller closes the program; links and pins stay.
func (o *Objects) LoadVMPort(xsks *ebpf.Map) (*ebpf.Program, error) {
	spec, err := loadVmport()
	if err != nil {
		return nil, err
	}
	// Counters, the monitor and the checksum scratch are the other
	// collections'; the socket map is the port's own.
	opts := o.shareWith(spec)
	opts.MapReplacements[xsksMap] = xsks
	var p struct {
		Prog *ebpf.Program `ebpf:"xlane_xdp_to_vm"`
	}
	if err := spec.LoadAndAssign(&p, opts); err != nil {
		return nil, fmt.Errorf("load vm port program: %w", err)
	}
	return p.Prog, nil
}
