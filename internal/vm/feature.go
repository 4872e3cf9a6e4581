package vm

import (
	"log/slog"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
)

// VMs is the feature: its address servers and the QEMU probe.
type VMs struct {
	core     core.Core
	qemuPath string
	dhcp     dhcpServers // DHCPv4/v6 and RAs on VM endpoints' taps (dhcp.go)
	qemu     qemuProbe   // what the node's QEMU offers VM endpoints (qemu.go)
}

// New makes the feature; qemu is the qemu-system-x86_64 whose netdev
// backends decide which backends this node offers ("": DefaultQEMU).
func New(c core.Core, qemu string, log *slog.Logger) *VMs {
	return &VMs{core: c, qemuPath: qemu, dhcp: dhcpServers{log: log}}
}

// Serve starts VM endpoint e's address servers on its tap unless they run.
func (v *VMs) Serve(e *model.Endpoint, n *model.Network) error { return v.dhcp.start(e, n) }

// Stop stops endpoint id's address servers; none running is fine.
func (v *VMs) Stop(id string) { v.dhcp.stop(id) }

// Notes are what endpoint inspect says of endpoint id's address servers.
func (v *VMs) Notes(id string) []string { return v.dhcp.notes(id) }

// Close stops every address server.
func (v *VMs) Close() { v.dhcp.stopAll() }
