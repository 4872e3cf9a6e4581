package daemon

import (
	"sync/atomic"
	"time"
)

// ctGrace is how long past its deadline an entry survives the GC.
const ctGrace = 10 * time.Second

// ctCounters count the GC's passes and what they deleted (CTStats).
type ctCounters struct {
	gcRuns, gcDeleted atomic.Uint64
}

// gcLoop collects expired conntrack entries every interval until done.
func (d *Daemon) gcLoop(interval time.Duration, done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			n, err := d.dp.GCCT(uint64(ctGrace))
			d.ct.gcRuns.Add(1)
			d.ct.gcDeleted.Add(uint64(n))
			if err != nil {
				d.log.Warn("conntrack gc", "err", err)
			}
		}
	}
}
