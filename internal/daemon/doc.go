// Package daemon is xlaned's core: it validates requests, records them in
// the store, and makes the kernel match the store. Every change is checked
// in full before anything is touched; a failure while applying undoes what
// was applied and rolls the store transaction back, so nothing is left
// half-created. Reconcile rebuilds the kernel side from the store at start.
//
// The API server (internal/server) and the Docker driver (internal/docker)
// call into this package; neither touches netlink or BPF directly.
package daemon
