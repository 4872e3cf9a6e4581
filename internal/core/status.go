package core

import (
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// Status is the core's own state as the status' health and the metrics
// read it (internal/observe: health.go, metrics.go): a copy, read without
// the lock.
type Status struct {
	// Started is when the daemon started.
	Started time.Time
	// Uplink is the node's uplink ("" : none).
	Uplink string
	// GCInterval is the conntrack GC's interval.
	GCInterval time.Duration
	GC         GCStatus
	// LastError is the last warning or error xlaned logged (nil: none).
	LastError *api.LastError
	// ObjectErrors are what the last reconcile could not apply
	// (ObjectError), sorted by kind and name.
	ObjectErrors []ObjectError
	// RunStats: xlaned holds the BPF run statistics on (--bpf-stats).
	RunStats bool
}

// GCStatus is what the conntrack GC did.
type GCStatus struct {
	Runs, Deleted uint64
	// Duration is the passes' total time.
	Duration time.Duration
	// LastRun is when the last pass ended (zero: none yet); LoopStart when
	// the GC's loop started (zero: not started).
	LastRun, LoopStart time.Time
}

// ObjectError is one object the core could not apply, and why.
type ObjectError struct{ Kind, Name, Err string }
