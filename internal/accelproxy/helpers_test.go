package accelproxy

import (
	"testing"

	"github.com/xlane-dev/xlane/internal/core/coretest"
	"github.com/xlane-dev/xlane/internal/datapath/datapathtest"
)

// fakeControl is the socket layer's control on a fake datapath and a
// private store: no BPF, no namespaces (cgroups are real: testCgroup).
func fakeControl(t testing.TB) (*Control, *datapathtest.Fake) {
	t.Helper()
	fake := datapathtest.New()
	return New(coretest.New(t, fake), Config{}), fake
}
