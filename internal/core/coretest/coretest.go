package coretest

import (
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// ErrNoDaemon is what the operations that need the daemon return.
var ErrNoDaemon = errors.New("coretest: no daemon behind this core")

// Core is a core.Core on a private store and a given datapath.
type Core struct {
	sync.Mutex
	St   *store.Store
	DP   datapath.Datapath
	Feat *features.Set
	// Faults are the fault points (FaultPoint): set Faults.Hook to fail
	// one.
	Faults core.Faults
	// Node is the datapath's node configuration (UpdateNodeConfig).
	Node datapath.NodeConfig
	// ObjErrs are the recorded object errors by kind and name.
	ObjErrs map[[2]string]error
	done    chan struct{}
}

var _ core.Core = (*Core)(nil)

// New is a core on dp and a store in the test's temporary directory,
// closed (with done) when the test ends.
func New(t testing.TB, dp datapath.Datapath) *Core {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Core{St: st, DP: dp, Feat: &features.Set{}, ObjErrs: map[[2]string]error{}, done: make(chan struct{})}
	t.Cleanup(func() { close(c.done); st.Close() })
	return c
}

func (c *Core) Log() *slog.Logger                      { return slog.New(slog.DiscardHandler) }
func (c *Core) Store() *store.Store                    { return c.St }
func (c *Core) Datapath() datapath.Datapath            { return c.DP }
func (c *Core) Kernel() *features.Set                  { return c.Feat }
func (c *Core) Done() <-chan struct{}                  { return c.done }
func (c *Core) FaultPoint(point string) error          { return c.Faults.At(point) }
func (c *Core) ModeMissing(m model.Mode) error         { return nil }
func (c *Core) RememberForwarding4(string) error       { return nil }
func (c *Core) CTGC() (runs, deleted uint64)           { return 0, 0 }
func (c *Core) ReasonCounters(int) []api.ReasonCounter { return nil }
func (c *Core) Status() core.Status                    { return core.Status{} }

func (c *Core) ObjectError(kind, name string, err error) {
	if err == nil {
		delete(c.ObjErrs, [2]string{kind, name})
		return
	}
	c.ObjErrs[[2]string{kind, name}] = err
}

func (c *Core) UpdateNodeConfig(fn func(*datapath.NodeConfig)) error {
	nc := c.Node
	fn(&nc)
	if nc == c.Node {
		return nil
	}
	if err := c.DP.SetConfig(nc); err != nil {
		return err
	}
	c.Node = nc
	return nil
}

func (c *Core) CreateNetwork(api.NetworkCreate) (*model.Network, error) { return nil, ErrNoDaemon }
func (c *Core) AddEndpoint(api.EndpointAdd) (*model.Endpoint, error)    { return nil, ErrNoDaemon }
func (c *Core) RemoveNetwork(string) error                              { return ErrNoDaemon }
func (c *Core) DefaultMode(*calibrate.Choice) model.Mode                { return core.AutoMode }
