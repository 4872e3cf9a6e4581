package e2e

// bench/peers' rows at the 10,000-Service level beside the connection
// rate: an EndpointSlice change (p50/p99) and the agents' BPF map memory.

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlane-dev/xlane/bench/peers"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

// peersChanges is the EndpointSlice changes timed per setup.
const peersChanges = 24

// peersChangePhase moves the only endpoint of the first of the 10,000
// Services (name, its ClusterIP vip) between the remote pod's connection
// server (id 2) and the local pod's (id 1), peersChanges times, as
// bench/k8s times a change against kube-proxy: a prober in the client
// pod (connrate.ProbeChange, a connection a millisecond) reports when the
// new backend first answers, timed from the EndpointSlice update call;
// before each change the previous one must be seen. p50 and p99
// (nearest rank: with 24 changes, the largest) in ms.
func peersChangePhase(t *testing.T, rep *peers.Report, s *peerSetup, self, name string, vip string) {
	t.Helper()
	ctx := context.Background()
	cmd := s.client.command(self, "-target", vip)
	cmd.Env = append(os.Environ(), peersHelperEnv+"=probe-change")
	p, err := connrate.StartChangeProber(s.info.Name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	backends := []*benchPod{s.local, s.remote} // ids 1, 2
	var ms []float64
	lost := 0
	for k := range peersChanges {
		b := k%2 + 1 // local, remote, local, ...
		if err := p.Settled(byte('0' + 3 - b)); err != nil {
			t.Fatalf("%s: EndpointSlice change %d: %v", s.info.Name, k+1, err)
		}
		es, err := s.cp.cs.DiscoveryV1().EndpointSlices("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: get EndpointSlice %s: %v", s.info.Name, name, err)
		}
		es.Endpoints[0].Addresses = []string{backends[b-1].ip.String()}
		if err := p.Expect(byte('0' + b)); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if _, err := s.cp.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: update EndpointSlice %s: %v", s.info.Name, name, err)
		}
		done, err := p.Result()
		if err != nil {
			lost++
			continue
		}
		ms = append(ms, float64(done.Sub(t0).Microseconds())/1000)
	}
	if lost > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d of %d EndpointSlice changes not seen within 10 s (left out of p50/p99)", s.info.Name, lost, peersChanges))
		t.Errorf("%s: %d of %d EndpointSlice changes not seen within 10 s", s.info.Name, lost, peersChanges)
	}
	p50, p99 := peers.Percentile(ms, 50), peers.Percentile(ms, 99)
	rep.Add(s.info.Name, "EndpointSlice change p50", 1, p50)
	rep.Add(s.info.Name, "EndpointSlice change p99", 1, p99)
	t.Logf("%s: %d EndpointSlice changes at %d Services: p50 %.1f ms, p99 %.1f ms (%v)", s.info.Name, len(ms), peersScaleServices, p50, p99, ms)
}

// bpfMapMemory is the memory of the BPF maps agent pid holds (MiB) and
// their number: every map reachable from its file descriptors (maps, and
// the maps of the programs and links it holds) or pinned under pinRoot in
// its mount namespace (maps, and the maps of pinned programs and links),
// each map once (by id), at the kernel's memlock figure (the map's
// memory use: for a preallocated map its whole size, for a
// BPF_F_NO_PREALLOC hash what its entries take).
func bpfMapMemory(pid int, pinRoot string) (float64, int, error) {
	maps := map[ebpf.MapID]bool{}
	progs := map[ebpf.ProgramID]bool{}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return 0, 0, err
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil || !strings.HasPrefix(target, "anon_inode:bpf") {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			k, v, _ := strings.Cut(l, ":")
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				continue
			}
			switch {
			case k == "map_id" && target == "anon_inode:bpf-map":
				maps[ebpf.MapID(id)] = true
			case k == "prog_id": // a program's or a link's
				progs[ebpf.ProgramID(id)] = true
			}
		}
	}
	root := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), pinRoot)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil // a pin removed under the walk
		}
		ro := &ebpf.LoadPinOptions{ReadOnly: true}
		if m, err := ebpf.LoadPinnedMap(path, ro); err == nil {
			if info, err := m.Info(); err == nil {
				if id, ok := info.ID(); ok {
					maps[id] = true
				}
			}
			m.Close()
		} else if p, err := ebpf.LoadPinnedProgram(path, ro); err == nil {
			if info, err := p.Info(); err == nil {
				if id, ok := info.ID(); ok {
					progs[id] = true
				}
			}
			p.Close()
		} else if l, err := link.LoadPinnedLink(path, ro); err == nil {
			if info, err := l.Info(); err == nil {
				progs[info.Program] = true
			}
			l.Close()
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	for id := range progs {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded since
		}
		if info, err := p.Info(); err == nil {
			ids, _ := info.MapIDs()
			for _, m := range ids {
				maps[m] = true
			}
		}
		p.Close()
	}
	var bytes int64
	for id := range maps {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		bytes += mapMemlock(m)
		m.Close()
	}
	return float64(bytes) / (1 << 20), len(maps), nil
}

// mapMemlock is the memlock line of m's fdinfo (bytes).
func mapMemlock(m *ebpf.Map) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "memlock:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// bpfMaps records the mean BPF map memory of s's agents as row.
func (s *peerSetup) bpfMaps(t *testing.T, rep *peers.Report, row string) {
	t.Helper()
	var mib float64
	var counts []int
	for i, pid := range s.agents {
		m, n, err := bpfMapMemory(pid, s.pinRoots[i])
		if err != nil {
			t.Fatalf("%s: BPF maps of agent %d: %v", s.info.Name, pid, err)
		}
		mib += m / float64(len(s.agents))
		counts = append(counts, n)
	}
	rep.Add(s.info.Name, row, 1, mib)
	t.Logf("%s: %s: %.1f MiB a node (maps per node: %v)", s.info.Name, row, mib, counts)
}
