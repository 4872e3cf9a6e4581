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

// all lists the errors, sorted by kind and name (core.Status).
func (o *objectErrors) all() []core.ObjectError {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]core.ObjectError, 0, len(o.m))
	for k, e := range o.m {
		out = append(out, core.ObjectError{Kind: k.kind, Name: k.name, Err: e})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}
