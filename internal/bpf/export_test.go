package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
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
		"tcuplink": &_TcuplinkBytes, "tcoverlay": &_TcoverlayBytes, "tcvlan": &_TcvlanBytes,
		"netkit": &_NetkitBytes, "socklb": &_SocklbBytes,
	}
	// This build's specs, before the swap: what the old ones lack.
	current := map[string]*ebpf.CollectionSpec{}
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){
		"tc": loadTc, "xdp": loadXdp, "uplink": loadUplink, "tcuplink": loadTcuplink,
		"tcoverlay": loadTcoverlay, "tcvlan": loadTcvlan, "socklb": loadSocklb,
	} {
		spec, err := load()
		if err != nil {
			return nil, err
		}
		current[name] = spec
	}
	saved := map[string][]byte{}
	for name, v := range vars {
		b, err := os.ReadFile(filepath.Join(dir, name+"_bpfel.o"))
		if errors.Is(err, os.ErrNotExist) && (name == "tcoverlay" || name == "tcvlan") {
			// A build from before these were split out of tcuplink:
			// this build's (no per-packet benchmark runs them).
			b, err = *v, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read old object %s: %w", name, err)
		}
		saved[name], *v = *v, b
	}
	adaptSpec = func(name string, spec *ebpf.CollectionSpec) { addMissing(spec, current[name]) }
	defer func() {
		adaptSpec = func(string, *ebpf.CollectionSpec) {}
		for name, v := range vars {
			*v = saved[name]
		}
	}()
	return Load("", o...)
}

// addMissing gives an older build's spec old what this build's spec cur
// has and old lacks, so that Load can assign it: a map added since (unused:
// old's programs do not reference it), a variable added since (in a copy
// of its data section of its own, as old's section of that name has old's
// layout) and a stand-in for a program added since (it returns 1, which
// every program type accepts, a cgroup hook only that; nothing of old's
// measures it).
func addMissing(old, cur *ebpf.CollectionSpec) {
	if cur == nil {
		return
	}
	for name, m := range cur.Maps {
		if _, ok := old.Maps[name]; !ok && !isDataSection(name) {
			old.Maps[name] = m.Copy()
		}
	}
	for name, v := range cur.Variables {
		if _, ok := old.Variables[name]; ok {
			continue
		}
		sec := v.SectionName + ".added"
		if _, ok := old.Maps[sec]; !ok {
			m := cur.Maps[v.SectionName].Copy()
			m.Name = sec
			old.Maps[sec] = m
		}
		nv := v.Copy()
		nv.SectionName = sec
		old.Variables[name] = nv
	}
	for name, p := range cur.Programs {
		if _, ok := old.Programs[name]; ok {
			continue
		}
		old.Programs[name] = &ebpf.ProgramSpec{
			Name: p.Name, Type: p.Type, AttachType: p.AttachType, AttachTo: p.AttachTo,
			SectionName: p.SectionName, License: p.License,
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
		}
	}
}

// Return codes of the programs, as the verdict check reads them.
const (
	retXDPDrop     = 1
	retXDPPass     = 2
	retXDPTX       = 3
	retXDPRedirect = 4
	retTCOK        = 0
	retTCShot      = 2
	retTCRedirect  = 7
	retTCUnspec    = 0xffffffff
)

// metricsSnapshot is xlane_metrics' packets per key, summed over CPUs.
func metricsSnapshot(m *ebpf.Map) (map[MetricsKey]uint64, error) {
	var (
		k    MetricsKey
		vals []MetricsVal
		out  = map[MetricsKey]uint64{}
	)
	it := m.Iterate()
	for it.Next(&k, &vals) {
		for _, v := range vals {
			out[k] += v.Packets
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("iterate metrics: %w", err)
	}
	return out, nil
}

// verdictAgrees says whether a program of type typ that returned ret may
// have counted the packet under reason r: a drop reason with a drop (or,
// for a reject, a packet too big answered with ICMP or a VIP without
// backends answered, the answer sent back), a pass reason with a pass, a
// forward reason with a redirect.
func verdictAgrees(typ ebpf.ProgramType, ret uint32, r Reason) bool {
	reject := r.String() == "drop_fw_reject" || r.String() == "drop_too_big" || r.String() == "drop_no_backend"
	if typ == ebpf.XDP {
		switch r.Class() {
		case ClassPass:
			return ret == retXDPPass
		case ClassDrop:
			return ret == retXDPDrop || reject && (ret == retXDPTX || ret == retXDPRedirect)
		case ClassForward:
			return ret == retXDPRedirect
		}
		return false
	}
	switch r.Class() {
	case ClassPass:
		return ret == retTCUnspec || ret == retTCOK
	case ClassDrop:
		return ret == retTCShot || reject && ret == retTCRedirect
	case ClassForward:
		return ret == retTCRedirect
	}
	return false
}

// ErrVerdict is what RunVerdict returns for a run whose verdict disagrees
// with a reason it counted.
var ErrVerdict = errors.New("verdict disagrees with the counted reason")

// RunVerdict runs prog with opts (inside do: the test's netns) and returns
// an ErrVerdict error unless every reason the run counted in metrics agrees
// with the program's return code (verdictAgrees), and it counted at least
// one. Every test table that runs a program goes through it, so a reason
// that can leave a program with the wrong verdict fails the table that
// reaches it.
func RunVerdict(do func(func() error) error, prog *ebpf.Program, metrics *ebpf.Map,
	opts *ebpf.RunOptions) (uint32, error) {
	before, err := metricsSnapshot(metrics)
	if err != nil {
		return 0, err
	}
	var ret uint32
	if err := do(func() (err error) {
		ret, err = prog.Run(opts)
		return err
	}); err != nil {
		return ret, err
	}
	after, err := metricsSnapshot(metrics)
	if err != nil {
		return ret, err
	}
	counted := 0
	for k, n := range after {
		if n <= before[k] {
			continue
		}
		r := Reason(k.Reason)
		// ct_from_endpoint's note of a full table (ifindex 0) rides
		// along with the packet's own reason: not an exit.
		if k.Ifindex == 0 && r.String() == "pass_ct_full" && Dir(k.Dir) == DirEgress {
			continue
		}
		counted++
		if !verdictAgrees(prog.Type(), ret, r) {
			return ret, fmt.Errorf("%s returned %d but counted %s: %w", prog, int32(ret), r, ErrVerdict)
		}
	}
	if counted == 0 {
		if ok, err := playTCX(prog, ret, opts, metrics); ok {
			return ret, err
		}
		return ret, fmt.Errorf("%s returned %d and counted no reason: %w", prog, int32(ret), ErrVerdict)
	}
	return ret, nil
}
