package daemon

import "github.com/xlane-dev/xlane/internal/store"

// Store returns the daemon's state store, for the parts xlaned serves
// beside the API that keep their own records in it (the Docker driver's
// buckets, see store/docker.go). Changes to networks and endpoints go
// through the Daemon's methods, never through the store directly.
func (d *Daemon) Store() *store.Store { return d.store }
