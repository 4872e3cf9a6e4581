package vm

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// VM endpoint backends: the tap, and the AF_XDP port where the node's QEMU
// (New's qemu, xlaned --qemu) has the af-xdp netdev backend with map-path= (QEMU >= 10.1
// built with libxdp >= 1.4; Debian's builds have no af-xdp:
// scripts/qemu-afxdp.sh builds one). Status says which; an af-xdp port is
// refused with the reason where QEMU lacks it.

// DefaultQEMU is the QEMU xlaned probes unless told another (--qemu).
const DefaultQEMU = "qemu-system-x86_64"

// qemuProbe runs the probe once per daemon.
type qemuProbe struct {
	once sync.Once
	st   api.VMStatus
}

// Status says what the node's QEMU offers VM endpoints (probed once).
func (v *VMs) Status() api.VMStatus {
	v.qemu.once.Do(func() { v.qemu.st = probeQEMU(v.qemuPath) })
	return v.qemu.st
}

var qemuVersionRE = regexp.MustCompile(`version (\d+)\.(\d+)`)

// probeQEMU says what the QEMU at path (a name looked up in PATH) offers.
func probeQEMU(name string) api.VMStatus {
	st := api.VMStatus{Backends: []string{model.BackendTap}}
	if name == "" {
		name = DefaultQEMU
	}
	path, err := exec.LookPath(name)
	if err != nil {
		st.AFXDPReason = fmt.Sprintf("no %s on this node", name)
		return st
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, path, "--version").Output(); err == nil {
		st.QEMU, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	// -machine none: a QEMU built without a default machine (the one of
	// scripts/qemu-afxdp.sh has only q35) refuses -netdev help without one.
	out, err := exec.CommandContext(ctx, path, "-machine", "none", "-netdev", "help").Output()
	if err != nil {
		st.AFXDPReason = fmt.Sprintf("%s -netdev help: %v", path, err)
		return st
	}
	has := false
	for _, l := range strings.Fields(string(out)) {
		has = has || l == model.BackendAFXDP
	}
	st.AFXDPReason = afxdpMissing(path, st.QEMU, has)
	if st.AFXDPReason == "" {
		st.AFXDP = true
		st.Backends = append(st.Backends, model.BackendAFXDP)
	}
	return st
}

// afxdpMissing says why the QEMU at path (version line ver) cannot run an
// AF_XDP port, or "".
func afxdpMissing(path, ver string, hasBackend bool) string {
	if !hasBackend {
		return fmt.Sprintf("%s (%s) has no af-xdp netdev backend (needs QEMU >= 10.1 built with libxdp >= 1.4: scripts/qemu-afxdp.sh builds one; xlaned --qemu names it)", path, ver)
	}
	m := qemuVersionRE.FindStringSubmatch(ver)
	if m == nil {
		return fmt.Sprintf("%s: cannot read its version from %q", path, ver)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 10 || major == 10 && minor < 1 {
		return fmt.Sprintf("%s (%s) has af-xdp but no map-path= (QEMU >= 10.1), which xlane's ports need", path, ver)
	}
	return ""
}

// checkBackend refuses a VM backend this node cannot run, with the reason.
func (v *VMs) checkBackend(b string) error {
	switch b {
	case "", model.BackendTap:
		return nil
	case model.BackendAFXDP:
		if st := v.Status(); !st.AFXDP {
			return fmt.Errorf("backend %s: %s: %w", b, st.AFXDPReason, model.ErrUnavailable)
		}
		return nil
	}
	return model.Fieldf("backend", "%q: unknown VM backend (want %s or %s)", b, model.BackendTap, model.BackendAFXDP)
}
