package rate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// CPUs of the rate test on a machine with two or more: the generator on
// one, the datapath (the client host veth's NAPI thread) on another.
const (
	GenCPU  = 1
	NAPICPU = 0
)

// NAPIPriority is the SCHED_FIFO priority of the datapath's NAPI
// thread during the rate test.
const NAPIPriority = 50

// GenPriority is the generator thread's SCHED_FIFO priority.
const GenPriority = 40

// Entry is how host veth A takes the generator's packets in for a run.
type Entry struct {
	Desc  string // e.g. "host veth NAPI (native XDP), threaded on CPU 0"
	GROOn bool   // GRO was switched on for the run (undone by the undo stack)
	// NAPIThread is the pid of the veth's NAPI thread (threaded NAPI),
	// whose run time is the receiver's own work; 0 when the packets go
	// through the RPS backlog (ksoftirqd, shared with the rest of CPU
	// NAPICPU).
	NAPIThread int
}

// PrepareEntry sets up how host veth A takes the generator's packets in
// and gives that processing CPU NAPICPU at SCHED_FIFO (see the package doc and
// bench/modes/rate.go). undo gets the restore steps.
func PrepareEntry(ctx context.Context, p harness.Pair, src gen.Source, undo *harness.UndoStack) (e Entry, err error) {
	dev := p.ClientHostIf
	native, err := nativeXDP(ctx, p.Node, dev)
	if err != nil {
		return e, err
	}
	if !native && src == gen.Frames {
		// ndo_xdp_xmit into a veth needs NAPI on its peer.
		feats, err := EthtoolFeatures(ctx, p.Node, dev)
		if err != nil {
			return e, err
		}
		if feats["generic-receive-offload"] != "on" {
			if _, err := harness.Run(ctx, harness.NSExec(p.Node, "ethtool", "-K", dev, "gro", "on")...); err != nil {
				return e, fmt.Errorf("rate: GRO on %s: %w", dev, err)
			}
			e.GROOn = true
			undo.Push("GRO off on "+dev, func(ctx context.Context) error {
				_, err := harness.Run(ctx, harness.NSExec(p.Node, "ethtool", "-K", dev, "gro", "off")...)
				return err
			})
		}
	}
	if runtime.NumCPU() < 2 {
		e.Desc = "one CPU: generator and datapath share it"
		return e, nil
	}
	// /sys/class/net shows the netns that mounted /sys: ip netns exec
	// remounts it for the node netns (bpffs is not needed here).
	sysfs := func(ctx context.Context, file, v string) error {
		_, err := harness.Run(ctx, "ip", "netns", "exec", p.Node, "sh", "-c", `echo "$1" > "/sys/class/net/$2/$3"`, "sh", v, dev, file)
		return err
	}
	if native || src == gen.Frames {
		old := napiThreads(dev)
		if err := sysfs(ctx, "threaded", "1"); err != nil {
			return e, fmt.Errorf("rate: threaded NAPI on %s: %w", dev, err)
		}
		undo.Push("threaded NAPI off on "+dev, func(ctx context.Context) error { return sysfs(ctx, "threaded", "0") })
		var pid int
		err = harness.WaitFor(ctx, "NAPI thread of "+dev, 5*time.Second, nil, func() bool {
			for _, t := range napiThreads(dev) {
				if !slices.Contains(old, t) {
					pid = t
					return true
				}
			}
			return false
		})
		if err != nil {
			return e, err
		}
		// The thread goes away with threaded NAPI: nothing to restore.
		if err := pinFIFO(pid, NAPICPU, NAPIPriority); err != nil {
			return e, fmt.Errorf("rate: NAPI thread %d of %s: %w", pid, dev, err)
		}
		e.NAPIThread = pid
		e.Desc = fmt.Sprintf("host veth NAPI (%s), threaded on CPU %d", map[bool]string{true: "native XDP", false: "GRO"}[native], NAPICPU)
		return e, nil
	}
	// No NAPI: veth_xmit queues the skb on the backlog of the sending
	// CPU; RPS sends it to NAPICPU's instead.
	out, err := harness.Run(ctx, "ip", "netns", "exec", p.Node, "cat", "/sys/class/net/"+dev+"/queues/rx-0/rps_cpus")
	if err != nil {
		return e, err
	}
	oldRPS := strings.TrimSpace(out)
	if err := sysfs(ctx, "queues/rx-0/rps_cpus", fmt.Sprintf("%x", 1<<NAPICPU)); err != nil {
		return e, fmt.Errorf("rate: RPS on %s: %w", dev, err)
	}
	undo.Push("RPS off on "+dev, func(ctx context.Context) error { return sysfs(ctx, "queues/rx-0/rps_cpus", oldRPS) })
	// Softirq work beyond its budget moves to ksoftirqd, an ordinary
	// thread: make it as urgent as the NAPI thread for the run.
	ksoftirqd, err := kthreadPID(fmt.Sprintf("ksoftirqd/%d", NAPICPU))
	if err != nil {
		return e, err
	}
	var old unix.SchedAttr
	if a, err := unix.SchedGetAttr(ksoftirqd, 0); err == nil {
		old = *a
	} else {
		return e, fmt.Errorf("rate: ksoftirqd/%d: %w", NAPICPU, err)
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: NAPIPriority}
	if err := unix.SchedSetAttr(ksoftirqd, &attr, 0); err != nil {
		return e, fmt.Errorf("rate: SCHED_FIFO for ksoftirqd/%d: %w", NAPICPU, err)
	}
	undo.Push(fmt.Sprintf("restore ksoftirqd/%d", NAPICPU), func(context.Context) error {
		old.Size = unix.SizeofSchedAttr
		return unix.SchedSetAttr(ksoftirqd, &old, 0)
	})
	e.Desc = fmt.Sprintf("backlog steered to CPU %d by RPS (softirq, ksoftirqd/%d SCHED_FIFO)", NAPICPU, NAPICPU)
	return e, nil
}

// pinFIFO pins pid to cpu and makes it SCHED_FIFO prio.
func pinFIFO(pid, cpu, prio int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if err := unix.SchedSetAttr(pid, &attr, 0); err != nil {
		return fmt.Errorf("SCHED_FIFO: %w", err)
	}
	return nil
}

// kthreadPID finds the kernel thread named name.
func kthreadPID(name string) (int, error) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && strings.TrimSpace(string(b)) == name {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kernel thread %s", name)
}

// napiThreads lists the pids of kernel threads named napi/<dev>-<id>.
func napiThreads(dev string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		rest, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "napi/"+dev+"-")
		if _, err := strconv.Atoi(rest); ok && err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// nativeXDP reports whether dev in netns node runs a native (driver) XDP
// program, which gives a veth NAPI.
func nativeXDP(ctx context.Context, node, dev string) (bool, error) {
	out, err := harness.Run(ctx, "ip", "-n", node, "-d", "-j", "link", "show", "dev", dev)
	if err != nil {
		return false, err
	}
	var links []struct {
		XDP *struct {
			Mode int `json:"mode"`
		} `json:"xdp"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return false, fmt.Errorf("ip -d -j link show %s: %q: %v", dev, out, err)
	}
	const xdpAttachedDrv = 1
	return links[0].XDP != nil && links[0].XDP.Mode == xdpAttachedDrv, nil
}

// EthtoolFeatures parses `ethtool -k dev` in netns ns: feature -> "on"/"off"
// (with " [fixed]" where the driver does not let it change).
func EthtoolFeatures(ctx context.Context, ns, dev string) (map[string]string, error) {
	out, err := harness.Run(ctx, harness.NSExec(ns, "ethtool", "-k", dev)...)
	if err != nil {
		return nil, err
	}
	return measure.ParseEthtoolFeatures(out), nil
}
