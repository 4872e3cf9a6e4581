package daemon

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// VM endpoint backends. The tap is the one xlane builds; QEMU's AF_XDP
// backend (-netdev af-xdp, QEMU >= 8.2 built with libxdp >= 1.4) is not
// built yet (docs/vm.md). Status says whether the node's QEMU has it, and
// an af-xdp port is refused with that reason.

const (
	backendTap   = "tap"
	backendAFXDP = "af-xdp"
)

// qemuProbe runs once: what the node's qemu-system-x86_64 offers.
var qemuProbe = sync.OnceValue(func() api.VMStatus {
	st := api.VMStatus{Backends: []string{backendTap}}
	path, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		st.AFXDPReason = "no qemu-system-x86_64 on this node"
		return st
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, path, "--version").Output(); err == nil {
		st.QEMU, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	out, err := exec.CommandContext(ctx, path, "-netdev", "help").Output()
	if err != nil {
		st.AFXDPReason = fmt.Sprintf("%s -netdev help: %v", path, err)
		return st
	}
	for _, l := range strings.Fields(string(out)) {
		if l == backendAFXDP {
			st.AFXDP = true
		}
	}
	if !st.AFXDP {
		st.AFXDPReason = fmt.Sprintf("%s (%s) has no af-xdp netdev backend (needs QEMU >= 8.2 built with libxdp >= 1.4)", path, st.QEMU)
	} else {
		st.AFXDPReason = "QEMU has af-xdp, but xlane does not build AF_XDP ports yet (docs/vm.md)"
	}
	return st
})

// checkBackend refuses every VM backend but the tap, with the reason.
func checkBackend(b string) error {
	switch b {
	case "", backendTap:
		return nil
	case backendAFXDP:
		return fmt.Errorf("backend %s: %s: %w", b, qemuProbe().AFXDPReason, model.ErrUnavailable)
	}
	return model.Fieldf("backend", "%q: unknown VM backend (want %s or %s)", b, backendTap, backendAFXDP)
}
