package bpf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

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

// The names of enum ct_state and enum fw_action (bpf/lib/abi.h), read once
// from the tc object's BTF rather than mirrored by hand: CT_ESTABLISHED is
// "established", FW_DROP "drop". Nil when the BTF cannot be read (the
// tests fail then).
var (
	ctStateNames  = sync.OnceValue(func() []string { n, _ := enumNames(loadTc, "ct_state"); return n })
	fwActionNames = sync.OnceValue(func() []string { n, _ := enumNames(loadTc, "fw_action"); return n })
)

// CTStateNames are the conntrack states' names, indexed by enum ct_state.
func CTStateNames() []string { return slices.Clone(ctStateNames()) }

// CTStateName names a conntrack state ("established"), or gives its number.
func CTStateName(s uint8) string { return nameOf(ctStateNames(), uint64(s)) }

// FwActionName names a firewall action ("drop"), or gives its number.
func FwActionName(a uint8) string { return nameOf(fwActionNames(), uint64(a)) }

func nameOf(names []string, v uint64) string {
	if v < uint64(len(names)) && names[v] != "" {
		return names[v]
	}
	return strconv.FormatUint(v, 10)
}
