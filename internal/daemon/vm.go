package daemon

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// VM endpoints: a QEMU guest's port is a persistent tap that xlane creates
// and programs as it does a container's host veth (same tc programs, same
// anti-spoofing on the guest's MAC and addresses), and that QEMU opens by
// name (model.Endpoint.QEMUArgs). Nobody configures the guest from the
// outside: it asks for its address by DHCP, which xlaned answers on the tap
// from the endpoint's lease (dhcp.go).

// tapPrefix starts the name of every VM endpoint's tap.
const tapPrefix = "xlv"

// tapName derives the tap's name from the endpoint ID, stable across
// restarts like hostIfNames.
func tapName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return tapPrefix + hex.EncodeToString(sum[:])[:10]
}

// validateVM checks the VM-only fields of an endpoint request.
func validateVM(e *model.Endpoint, req api.EndpointAdd) error {
	switch {
	case req.Netns != "":
		return model.Fieldf("netns", "%q: a VM endpoint takes no netns (the guest is behind a tap QEMU opens)", req.Netns)
	case req.VethOnly:
		return model.Fieldf("veth_only", "a VM endpoint has a tap, not a veth")
	case req.Queues < 0 || req.Queues > model.MaxVMQueues:
		return model.Fieldf("queues", "%d: want 1-%d", req.Queues, model.MaxVMQueues)
	}
	if err := checkBackend(req.Backend); err != nil {
		return err
	}
	e.VM = true
	e.Queues = max(req.Queues, 1)
	return nil
}

// vmNetwork refuses networks whose mode cannot carry a VM endpoint.
func vmNetwork(n *model.Network) error {
	if n.Mode.XDP() {
		return errVMMode(n.Mode)
	}
	return nil
}

func errVMMode(m model.Mode) error {
	return model.Fieldf("vm", "network mode %s: VM endpoints need mode tc or kernel (XDP cannot redirect into a tap: it has no NAPI to take the frames)", m)
}

// randomMAC is a locally administered unicast MAC for a guest that was
// given none.
func randomMAC() string {
	b := make([]byte, 6)
	rand.Read(b)
	b[0] = b[0]&^1 | 2
	return net.HardwareAddr(b).String()
}
