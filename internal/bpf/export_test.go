package bpf

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// loadMu serialises LoadFrom's swap of the embedded objects.
var loadMu sync.Mutex

// LoadFrom loads unpinned objects from the bpf2go output in dir (the
// *_bpfel.o of another build, e.g. main before a refactor) instead of the
// embedded ones; "" loads the embedded ones. Benchmarks compare the two in
// one run (bench_compare_test.go).
func LoadFrom(dir string, o ...Options) (*Objects, error) {
	if dir == "" {
		return Load("", o...)
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	vars := map[string]*[]byte{
		"tc": &_TcBytes, "xdp": &_XdpBytes, "uplink": &_UplinkBytes,
		"tcuplink": &_TcuplinkBytes, "netkit": &_NetkitBytes, "socklb": &_SocklbBytes,
	}
	saved := map[string][]byte{}
	for name, v := range vars {
		b, err := os.ReadFile(filepath.Join(dir, name+"_bpfel.o"))
		if err != nil {
			return nil, fmt.Errorf("read old object %s: %w", name, err)
		}
		saved[name], *v = *v, b
	}
	defer func() {
		for name, v := range vars {
			*v = saved[name]
		}
	}()
	return Load("", o...)
}
