package rate

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
)

// Options are the generator's settings for a run.
type Options struct {
	// Batch is the frames per flush of BPF_PROG_RUN (gen.Generate); 0:
	// the kernel's default (gen.DefaultBatch).
	Batch uint32
	// Backfill adds a second generator thread on NAPICPU, at SCHED_FIFO
	// BackfillPriority, below the datapath's NAPI thread: it runs only
	// while the datapath has nothing to do, so a datapath faster than
	// one generator thread still gets frames, and one slower than it
	// loses no time to it (beyond sharing CPU caches with it).
	Backfill bool
	// Anchor holds the generator program in the kernel's XDP dispatcher
	// for the run (gen.Objects.AttachAnchor), so that no call waits for
	// RCU grace periods.
	Anchor bool
}

// BackfillPriority is the backfill generator thread's SCHED_FIFO
// priority: the lowest, below NAPIPriority.
const BackfillPriority = 1

// GenRun is what one Generate measured.
type GenRun struct {
	Elapsed time.Duration // how long the generator ran
	// CPU is the generator threads' own run time over Elapsed
	// (schedstat): near Elapsed when the main thread ran flat out, less
	// when other load took its CPU; Backfill adds what the backfill
	// thread ran.
	CPU      time.Duration
	Wait     time.Duration // the main thread runnable but not running (another task on GenCPU)
	Backfill time.Duration // the backfill thread's run time (part of CPU)
}

// Generate runs the generator from the client container, pinned to
// GenCPU (and with o.Backfill a second thread on NAPICPU), for d.
func Generate(ctx context.Context, objs *gen.Objects, p harness.Pair, d time.Duration, o Options) (GenRun, error) {
	var run GenRun
	type result struct {
		t   ThreadTimes
		err error
	}
	if o.Anchor {
		undo, err := anchor(objs, p)
		if err != nil {
			return run, err
		}
		defer func() {
			if err := undo(); err != nil {
				log.Printf("rate: remove the generator's dispatcher anchor: %v", err)
			}
		}()
	}
	var backfill chan result
	start := time.Now()
	deadline := start.Add(d)
	if o.Backfill && runtime.NumCPU() >= 2 {
		backfill = make(chan result, 1)
		go func() {
			var r result
			r.t, r.err = generateThread(ctx, objs, p, deadline, o.Batch, NAPICPU, BackfillPriority)
			backfill <- r
		}()
	}
	t, err := generateThread(ctx, objs, p, deadline, o.Batch, GenCPU, GenPriority)
	run.CPU, run.Wait = t.Run, t.Wait
	if backfill != nil {
		// The backfill thread runs only while the datapath idles: after
		// the deadline it may still be in its last (short) call until
		// the datapath drains its ring. The run lasts until both stop.
		r := <-backfill
		if err == nil {
			err = r.err
		}
		run.Backfill = r.t.Run
		run.CPU += r.t.Run
	}
	run.Elapsed = time.Since(start)
	return run, err
}

// AnchorDev is the device in the client container that holds the
// generator program as generic XDP during a run (gen.Objects.AttachAnchor):
// one end of a veth pair of its own, down, so that it receives nothing
// (no dummy device: not every kernel here has the module).
const AnchorDev = "xlbanchor0"

// anchor creates AnchorDev in the client container and attaches the
// generator to it; the returned function undoes both.
func anchor(objs *gen.Objects, p harness.Pair) (func() error, error) {
	path := filepath.Join(harness.NetnsDir, p.Client)
	var l link.Link
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: AnchorDev}, PeerName: AnchorDev + "p"}); err != nil {
			return fmt.Errorf("rate: add %s: %w", AnchorDev, err)
		}
		d, err := netlink.LinkByName(AnchorDev)
		if err == nil {
			l, err = objs.AttachAnchor(d.Attrs().Index)
		}
		if err != nil {
			netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: AnchorDev}})
			return fmt.Errorf("rate: %s: %w", AnchorDev, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() error {
		err := l.Close()
		return errors.Join(err, ns.WithNetNSPath(path, func(ns.NetNS) error {
			return netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: AnchorDev}})
		}))
	}, nil
}

// generateThread runs the generator on a thread of its own in the client
// container, pinned to cpu at SCHED_FIFO prio, until deadline; it returns
// the thread's times over the run.
func generateThread(ctx context.Context, objs *gen.Objects, p harness.Pair, deadline time.Time, batch uint32, cpu, prio int) (ThreadTimes, error) {
	var times ThreadTimes
	err := ns.WithNetNSPath(filepath.Join(harness.NetnsDir, p.Client), func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(p.ClientIf)
		if err != nil {
			return err
		}
		// The thread is locked to this goroutine until the callback
		// returns; its CPU and policy are restored before that.
		if runtime.NumCPU() >= 2 {
			var set, all unix.CPUSet
			set.Set(cpu)
			for i := range runtime.NumCPU() {
				all.Set(i)
			}
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				return fmt.Errorf("pin generator: %w", err)
			}
			defer unix.SchedSetaffinity(0, &all)
		}
		// SCHED_FIFO too, so that other load on the machine does not
		// keep the generator from outrunning the datapath.
		rt := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
		if err := unix.SchedSetAttr(0, &rt, 0); err != nil {
			return fmt.Errorf("generator SCHED_FIFO: %w", err)
		}
		defer unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}, 0)
		t0, err := ReadThread(0)
		if err != nil {
			return err
		}
		// Long calls (without the anchor each would wait for two RCU
		// grace periods), sized to ~200 ms from the rate so far, the
		// last one cut to what is left. The backfill thread (below the datapath's
		// priority) gets CPU only while the datapath idles, which may
		// be never: its calls are short, so that it stops near the
		// deadline.
		slice, repeat, most := 200*time.Millisecond, uint32(1<<17), uint32(1<<30)
		if prio < NAPIPriority {
			b := max(batch, gen.DefaultBatch)
			repeat, most = 16*b, 16*b
		}
		for time.Until(deadline) > 0 && ctx.Err() == nil {
			c0 := time.Now()
			if err := objs.Generate(ifi.Index, repeat, batch); err != nil {
				return fmt.Errorf("generate: %w", err)
			}
			took := time.Since(c0)
			if harness.Verbose {
				log.Printf("generate on CPU %d: %d frames in %v", cpu, repeat, took)
			}
			rate := float64(repeat) / took.Seconds()
			repeat = uint32(max(1024, min(rate*min(slice, time.Until(deadline)).Seconds(), float64(most))))
		}
		t1, err := ReadThread(0)
		if err != nil {
			return err
		}
		times = ThreadTimes{Run: t1.Run - t0.Run, Wait: t1.Wait - t0.Wait, Sleeps: t1.Sleeps - t0.Sleeps}
		return ctx.Err()
	})
	return times, err
}

// ThreadTimes are a thread's CPU time, run-queue time and sleeps so far.
// Over an interval, what is neither Run nor Wait the thread slept: for a
// NAPI thread, it had no packets.
type ThreadTimes struct {
	Run    time.Duration // time on a CPU (/proc/PID/schedstat)
	Wait   time.Duration // runnable but waiting for the CPU (other load, or a higher priority)
	Sleeps uint64        // voluntary context switches: each a wait for work and a wake-up
}

// ReadThread reads the times of thread pid (0: the calling thread).
func ReadThread(pid int) (ThreadTimes, error) {
	dir := "/proc/thread-self"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d", pid)
	}
	var t ThreadTimes
	b, err := os.ReadFile(dir + "/schedstat")
	if err != nil {
		return t, fmt.Errorf("thread times: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return t, fmt.Errorf("thread times: %s/schedstat: %q", dir, b)
	}
	for i, d := range []*time.Duration{&t.Run, &t.Wait} {
		ns, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return t, fmt.Errorf("thread times: %s/schedstat: %w", dir, err)
		}
		*d = time.Duration(ns)
	}
	b, err = os.ReadFile(dir + "/status")
	if err != nil {
		return t, fmt.Errorf("thread times: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
			if t.Sleeps, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64); err != nil {
				return t, fmt.Errorf("thread times: %s/status: %w", dir, err)
			}
			return t, nil
		}
	}
	return t, fmt.Errorf("thread times: %s/status: no voluntary_ctxt_switches", dir)
}
