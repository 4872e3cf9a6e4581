package bpf

import (
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// A map declared in two collections (bpf/lib/maps.h included by both, say)
// must be one map: a private copy per collection means a conntrack entry
// written by the tc program that XDP never sees, a counter half counted, a
// config the uplink program never reads. The test loads every collection
// and checks, from the kernel's view of each program, that every map name
// is one map ID.
func TestMapsSharedAcrossCollections(t *testing.T) {
	objs := ObjectsFor(t, "")
	if err := objs.XDPErr(); err != nil {
		t.Fatalf("xdp programs: %v", err)
	}
	nk := NetkitFor(t, objs)
	progs := map[string][]*ebpf.Program{
		"tc":       {objs.XlaneFromEndpoint, objs.XlaneToEndpoint},
		"xdp":      {objs.xdp.FromEndpoint, objs.xdp.GenericFromEndpoint},
		"uplink":   {objs.fromUplink, objs.genUplink},
		"tcuplink": {objs.tcFromUplink},
		"socklb": {objs.sock.XlaneConnect4, objs.sock.XlaneConnect6, objs.sock.XlaneSendmsg4, objs.sock.XlaneSendmsg6,
			objs.sock.XlaneRecvmsg4, objs.sock.XlaneRecvmsg6},
		"netkit": {nk.FromEndpoint, nk.ToEndpoint},
	}

	// The kernel keeps 15 characters of a map's name: the names the specs
	// declare must stay apart at that length for the check to mean
	// anything.
	specs := map[string]func() (*ebpf.CollectionSpec, error){"tc": loadTc, "xdp": loadXdp, "uplink": loadUplink,
		"tcuplink": loadTcuplink, "socklb": loadSocklb, "netkit": loadNetkit}
	declared := map[string][]string{} // kernel name -> collections declaring it
	full := map[string]string{}
	for col, load := range specs {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for name := range spec.Maps {
			if isDataSection(name) {
				continue
			}
			k := name[:min(len(name), 15)]
			if f, ok := full[k]; ok && f != name {
				t.Fatalf("maps %s and %s look alike to the kernel (15 characters): rename one", f, name)
			}
			full[k] = name
			declared[k] = append(declared[k], col)
		}
	}

	ids := map[string]map[ebpf.MapID][]string{} // kernel name -> map IDs -> collections using it
	for col, ps := range progs {
		for _, p := range ps {
			info, err := p.Info()
			if err != nil {
				t.Fatal(err)
			}
			mids, _ := info.MapIDs()
			for _, id := range mids {
				m, err := ebpf.NewMapFromID(id)
				if err != nil {
					t.Fatal(err)
				}
				mi, err := m.Info()
				m.Close()
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(mi.Name, ".") { // .rodata, .bss: each collection's own
					continue
				}
				if ids[mi.Name] == nil {
					ids[mi.Name] = map[ebpf.MapID][]string{}
				}
				ids[mi.Name][id] = append(ids[mi.Name][id], col)
			}
		}
	}
	var shared int
	for name, byID := range ids {
		if len(byID) > 1 {
			var per []string
			for _, cols := range byID {
				sort.Strings(cols)
				per = append(per, strings.Join(cols, "+"))
			}
			sort.Strings(per)
			t.Errorf("map %s is %d maps, one per group of collections %v: it must be shared", full[name], len(byID), per)
		}
		if len(declared[name]) > 1 {
			shared++
		}
	}
	if shared == 0 || len(ids["xlane_ct"]) == 0 {
		t.Fatalf("no map is used by two collections: the test checks nothing (%v)", ids)
	}
}
