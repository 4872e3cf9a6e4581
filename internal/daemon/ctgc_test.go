package daemon

import (
	"testing"
	"time"
)

// The GC's lag before its first pass counts from the loop's start, not the
// daemon's: a start that took a minute to load its programs (6.1 under
// QEMU: TestRestartWhateverEndpointState's status right after the restart
// said "conntrack GC 71s behind" with 0 passes) is not a GC behind.
func TestGCLagFromLoopStart(t *testing.T) {
	d, _ := fakeDaemon(t)
	d.cfg.GCInterval = 10 * time.Second
	d.started = time.Now().Add(-time.Minute) // the programs' load and the reconcile
	done := make(chan struct{})
	defer close(done)
	go d.gcLoop(d.cfg.GCInterval, done)
	var lag float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		g := d.f.Reporter.Health().CTGC
		if lag = g.LagSeconds; lag == 0 && g.Runs == 0 {
			return
		}
	}
	t.Fatalf("GC lag %.0fs right after the loop started (no pass due yet), want 0: counted from the daemon's start", lag)
}
