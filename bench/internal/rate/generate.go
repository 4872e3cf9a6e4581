package rate

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
)

// Options are the generator's settings for a run.
type Options struct {
	// Batch is the frames per flush of BPF_PROG_RUN (gen.Generate); 0:
	// the kernel's default (gen.DefaultBatch).
	Batch uint32
}

// GenRun is what one Generate measured.
type GenRun struct {
	Elapsed time.Duration // how long the generator ran
	// CPU is the generator thread's own run time over Elapsed
	// (schedstat): near Elapsed when it ran flat out, less when other
	// load took its CPU.
	CPU time.Duration
}

// Generate runs the generator from the client container, pinned to
// GenCPU, for d.
func Generate(ctx context.Context, objs *gen.Objects, p harness.Pair, d time.Duration, o Options) (GenRun, error) {
	var run GenRun
	err := ns.WithNetNSPath(filepath.Join(harness.NetnsDir, p.Client), func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(p.ClientIf)
		if err != nil {
			return err
		}
		// The thread is locked to this goroutine until the callback
		// returns; its CPU and policy are restored before that.
		if runtime.NumCPU() >= 2 {
			var set, all unix.CPUSet
			set.Set(GenCPU)
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
		rt := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: GenPriority}
		if err := unix.SchedSetAttr(0, &rt, 0); err != nil {
			return fmt.Errorf("generator SCHED_FIFO: %w", err)
		}
		defer unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}, 0)
		cpu0, err := ReadThread(0)
		if err != nil {
			return err
		}
		// Long calls (each waits for an RCU grace period at its end),
		// sized to ~200 ms from the rate so far, the last one cut to
		// what is left.
		const slice = 200 * time.Millisecond
		repeat := uint32(1 << 17)
		start := time.Now()
		for {
			t0 := time.Now()
			if err := objs.Generate(ifi.Index, repeat, o.Batch); err != nil {
				return fmt.Errorf("generate: %w", err)
			}
			if harness.Verbose {
				log.Printf("generate: %d frames in %v", repeat, time.Since(t0))
			}
			run.Elapsed = time.Since(start)
			left := d - run.Elapsed
			if left <= 0 || ctx.Err() != nil {
				break
			}
			rate := float64(repeat) / time.Since(t0).Seconds()
			repeat = uint32(max(1024, min(rate*min(slice, left).Seconds(), 1<<30)))
		}
		cpu1, err := ReadThread(0)
		if err != nil {
			return err
		}
		run.CPU = cpu1.Run - cpu0.Run
		return ctx.Err()
	})
	return run, err
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
