package rate

import (
	"context"
	"fmt"
	"log"
	"net"
	"path/filepath"
	"runtime"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/bench/gen"
	"github.com/xlane-dev/xlane/bench/internal/harness"
)

// Generate runs the generator from the client container, pinned to
// GenCPU, for d; it returns the time it ran.
func Generate(ctx context.Context, objs *gen.Objects, p harness.Pair, d time.Duration) (time.Duration, error) {
	var elapsed time.Duration
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
		// Long calls (each waits for an RCU grace period at its end),
		// sized to ~200 ms from the rate so far, the last one cut to
		// what is left.
		const slice = 200 * time.Millisecond
		repeat := uint32(1 << 17)
		start := time.Now()
		for {
			t0 := time.Now()
			if err := objs.Generate(ifi.Index, repeat); err != nil {
				return fmt.Errorf("generate: %w", err)
			}
			if harness.Verbose {
				log.Printf("generate: %d frames in %v", repeat, time.Since(t0))
			}
			elapsed = time.Since(start)
			left := d - elapsed
			if left <= 0 || ctx.Err() != nil {
				return ctx.Err()
			}
			rate := float64(repeat) / time.Since(t0).Seconds()
			repeat = uint32(max(1024, min(rate*min(slice, left).Seconds(), 1<<30)))
		}
	})
	return elapsed, err
}
