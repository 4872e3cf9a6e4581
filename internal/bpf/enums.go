package bpf

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"

	"github.com/cilium/ebpf"
)

// becomes "sock_added" (the prefix up to the first '_' dropped, lower
// case), indexed by value; the _MAX entry is left out.
func enumNames(load func() (*ebpf.CollectionSpec, error), name string) ([]string, error) {
	spec, err := load()
	if err != nil {
		return nil, err
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName(name, &e); err != nil {
		return nil, fmt.Errorf("read enum %s: %w", name, err)
	}
	var names []string
	for _, v := range e.Values {
		if strings.HasSuffix(v.Name, "_MAX") {
			continue
		}
		for uint64(len(names)) <= v.Value {
			names = append(names, "")
		}
		n := v.Name
		if i := strings.IndexByte(n, '_'); i >= 0 {
			n = n[i+1:]
		}
		names[v.Value] = strings.ToLower(n)
	}
	return names, nil
}
