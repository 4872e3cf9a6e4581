package daemon

import (
	"sort"
	"sync"

	"github.com/xlane-dev/xlane/internal/core"
)

// objectErrors keeps why the last reconcile could not fully apply a
// network or an endpoint. Reconcile never stops over one object's state
// (a start must always succeed, an uninstall always run): it applies what
// it can, logs the rest and keeps it here, where `endpoint ls/inspect`
// (state "degraded") and the status' health show it until the next
// reconcile or the object's removal.
type objectErrors struct {
	mu sync.Mutex
	m  map[objectKey]string
}

type objectKey struct{ kind, name string }

// Kinds of object in objectErrors (core.Obj*).
const (
	objNetwork  = core.ObjNetwork
	objEndpoint = core.ObjEndpoint
	objPeer     = core.ObjPeer
	objNode     = core.ObjNode
)

// reset forgets the networks' and endpoints' errors (a reconcile
// starts).
func (o *objectErrors) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.m {
		if k.kind != objNode {
			delete(o.m, k)
		}
	}
}

func (o *objectErrors) set(kind, name string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.m, objectKey{kind, name})
		return
	}
	if o.m == nil {
		o.m = map[objectKey]string{}
	}
	o.m[objectKey{kind, name}] = err.Error()
}

func (o *objectErrors) get(kind, name string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[objectKey{kind, name}]
}

// counts counts the errors by kind (every kind, 0 or not, so that the
// series stay).
func (o *objectErrors) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{objNetwork: 0, objEndpoint: 0, objPeer: 0, objNode: 0}
	for k := range o.m {
		out[k.kind]++
	}
	return out
}

// problems lists the errors as health problems, one line each, of the
// objects exists says are still there (networks and endpoints removed
// since are left out).
func (o *objectErrors) problems(exists func(kind, name string) bool) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for k, e := range o.m {
		if exists(k.kind, k.name) {
			out = append(out, k.kind+" "+k.name+": "+e)
		}
	}
	sort.Strings(out)
	return out
}
