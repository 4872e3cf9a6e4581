package core

import (
	"log/slog"
	"sync"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Core is what a feature package gets from the daemon's core: the one lock
// every change holds, the store, the datapath, the kernel's features, the
// fault points of the validate/apply/rollback runner, and the network and
// endpoint operations a feature may drive (the calibration builds its test
// bed with them). It is an interface so that a feature never imports the
// daemon: internal/daemon implements it and imports the features, never the
// other way round.
type Core interface {
	// Locker is the lock that serialises every change. A feature takes it
	// around its own changes; the Core's methods below that change
	// anything take it themselves.
	sync.Locker
	Log() *slog.Logger
	Store() *store.Store
	Datapath() datapath.Datapath
	// Kernel is what this kernel can run (probed at start).
	Kernel() *features.Set
	// Done is closed when the daemon closes: background work stops.
	Done() <-chan struct{}
	// FaultPoint is the runner's fault hook (Faults.At).
	FaultPoint(point string) error
	// ModeMissing says why a network mode cannot run on this node, or nil.
	ModeMissing(m model.Mode) error
	// ObjectError records why an object could not be applied (nil: it
	// was), for the status' health and the metrics; kind is one of the
	// Obj* kinds.
	ObjectError(kind, name string, err error)
	// UpdateNodeConfig changes the datapath's node configuration with
	// fn and writes it if it changed; the caller holds the lock (or the
	// daemon is starting).
	UpdateNodeConfig(fn func(*datapath.NodeConfig)) error
	// RememberForwarding4 records net.ipv4.conf.<dev>.forwarding as it
	// is, if not recorded yet, for `xlaned --uninstall`: before a change
	// made later inside a store transaction.
	RememberForwarding4(dev string) error
	// ReasonCounters reads the datapath's counters of one device (0: the
	// node's), one line per reason and direction.
	ReasonCounters(ifindex int) []api.ReasonCounter
	// CTGC is what the conntrack garbage collector did: passes run and
	// entries deleted.
	CTGC() (runs, deleted uint64)
	// Status is the core's own state, read-only (status.go).
	Status() Status

	// CreateNetwork and AddEndpoint are the API's operations (each takes
	// the lock).
	CreateNetwork(req api.NetworkCreate) (*model.Network, error)
	AddEndpoint(req api.EndpointAdd) (*model.Endpoint, error)
	// RemoveNetwork removes a network with its endpoints, one of the
	// daemon's own (Hidden) too; it takes the lock.
	RemoveNetwork(name string) error
	// DefaultMode is the mode a network created without flags gets under
	// calibration choice.
	DefaultMode(choice *calibrate.Choice) model.Mode
}

// Kinds of object whose apply errors the core keeps (ObjectError).
const (
	ObjNetwork  = "network"
	ObjEndpoint = "endpoint"
	ObjPeer     = "node"      // another node of the cluster (internal/cluster)
	ObjNode     = "this node" // node-wide steps (pruning stale objects, socket load balancing)
)
