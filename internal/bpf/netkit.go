package bpf

import (
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
)

// NetkitObjects are the programs of endpoints on netkit devices
// (bpf/netkit_endpoint.c). They share every map with the tc collection.
type NetkitObjects struct {
	// FromEndpoint is the netkit peer program: the container's transmit.
	FromEndpoint *ebpf.Program `ebpf:"xlane_nk_from_endpoint"`
	// ToEndpoint is the netkit primary program: what enters the container.
	ToEndpoint *ebpf.Program `ebpf:"xlane_nk_to_endpoint"`
}

// Close releases the programs (links and pins stay).
func (n *NetkitObjects) Close() error {
	n.FromEndpoint.Close()
	return n.ToEndpoint.Close()
}

// LoadNetkit loads the netkit programs onto the maps of o. The programs load
// on any kernel of the matrix; attaching them needs netkit (6.7+).
func (o *Objects) LoadNetkit() (*NetkitObjects, error) {
	spec, err := loadNetkit()
	if err != nil {
		return nil, err
	}
	if err := setConstants(spec, o.opt); err != nil {
		return nil, err
	}
	// The netkit programs are the tc pipeline on another hook: every map
	// they declare is one the other collections have.
	opts := o.shareWith(spec)
	for name := range spec.Maps {
		if _, ok := opts.MapReplacements[name]; !ok && !isDataSection(name) {
			return nil, fmt.Errorf("load netkit programs: map %s is not in the other collections", name)
		}
	}
	var nk NetkitObjects
	if err := spec.LoadAndAssign(&nk, opts); err != nil {
		return nil, fmt.Errorf("load netkit programs: %w", err)
	}
	return &nk, nil
}

// mapsByName lists the tc collection's maps by their ELF names.
func (o *Objects) mapsByName() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(&o.tcMaps).Elem()
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Tag.Get("ebpf")
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && name != "" && m != nil {
			out[name] = m
		}
	}
	return out
}
