package daemon

import (
	"sync/atomic"
	"time"

	"github.com/xlane-dev/xlane/internal/model"
)

// ctGrace is how long past its deadline an entry survives the GC.
const ctGrace = 10 * time.Second

// ctCounters count the GC's passes, what they deleted and the time they
// took (CTStats, the metrics, the health summary).
type ctCounters struct {
	gcRuns, gcDeleted atomic.Uint64
	gcNanos           atomic.Uint64 // the passes' total duration
	lastUnixNano      atomic.Int64  // when the last pass ended (0: none yet)
	// loopUnixNano is when the loop started: the lag's base before the
	// first pass. Not the daemon's start: loading the programs (a minute
	// on 6.1 under QEMU) and the reconcile come first, and a status
	// asked for right after the start said "conntrack GC behind".
	loopUnixNano atomic.Int64
}

// lastRun is when the last pass ended (zero: none yet).
func (c *ctCounters) lastRun() time.Time { return unixNano(c.lastUnixNano.Load()) }

// unixNano is the time n nanoseconds after the epoch, zero for 0.
func unixNano(n int64) time.Time {
	if n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// gcLoop collects expired conntrack entries every interval until done.
func (d *Daemon) gcLoop(interval time.Duration, done <-chan struct{}) {
	d.ct.loopUnixNano.Store(time.Now().UnixNano())
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			start := time.Now()
			// Flows that end by timing out get their flow_close here.
			var collected func(model.Flow)
			closes := d.f.Observe.GCCloses()
			if closes != nil {
				collected = closes.Add
			}
			n, err := d.dp.GCCT(uint64(ctGrace), collected)
			closes.Send()
			end := time.Now()
			d.ct.gcNanos.Add(uint64(end.Sub(start)))
			d.ct.lastUnixNano.Store(end.UnixNano())
			d.ct.gcRuns.Add(1)
			d.ct.gcDeleted.Add(uint64(n))
			if err != nil {
				d.log.Warn("conntrack gc", "err", err)
			}
		}
	}
}
